# KYAI Operator: developer entry points. Every target sets up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test lint typecheck unit demo bench bench-operator crds clean image base-image podman-config

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	bash scripts/install-helm.sh $(VENV)
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

## make test: lint, type-check and the whole test suite (what CI runs).
test: lint typecheck
	$(BIN)/pytest -q

## make crds: regenerate crds/ from the pydantic models in operator/kyai/api.
crds: $(STAMP)
	$(BIN)/python -m kyai.api crds
	cp crds/*.yaml config/crd/bases/
	cp crds/*.yaml charts/kyai-operator/crds/

## make demo: a local KYAI run against the bundled OpenAI-compatible stand-in.
demo: $(STAMP)
	$(BIN)/python -m kyai.testing.demo

## make bench: the evaluation engine's throughput and memory benchmark.
bench: $(STAMP)
	$(BIN)/python bench/bench_engine.py

## make bench-operator: 100 EvaluationRuns over 10 Workloads in kyai devcluster.
bench-operator: $(STAMP)
	$(BIN)/python bench/bench_operator.py

## make image: the operator/worker image (IMAGE=, BASE_IMAGE=, ENGINE= podman|docker).
IMAGE ?= localhost/kyai-operator:dev
image: $(STAMP)
	IMAGE=$(IMAGE) PYTHON=$(BIN)/python bash scripts/build-image.sh

## make base-image: a Debian base image with python3 built by mmdebstrap (no registry needed).
base-image:
	bash scripts/build-base-image.sh

## make podman-config: plain `podman run` on hosts where crun or default rlimits are refused.
podman-config:
	bash scripts/podman-config.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache out build
