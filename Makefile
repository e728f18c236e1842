# KYAI Operator: developer entry points. Every target sets up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test lint typecheck layers unit demo bench bench-operator crds e2e clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,lm-eval]'
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

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

## make test: lint, type-check, import layers and the whole test suite (what CI runs).
test: lint typecheck layers
	$(BIN)/pytest -q

## make crds: regenerate crds/ from the pydantic models in operator/kyai/api, and the chart
## schema's engineImages from the engines registry.
crds: $(STAMP)
	$(BIN)/python -m kyai.api crds
	cp crds/*.yaml config/crd/bases/
	cp crds/*.yaml charts/kyai-operator/crds/
	$(BIN)/python -m kyai.engines charts/kyai-operator/values.schema.json

## make demo: a local KYAI run against the bundled OpenAI-compatible stand-in.
demo: $(STAMP)
	$(BIN)/python -m kyai.testing.demo

## make bench: the evaluation engine's throughput and memory benchmark.
bench: $(STAMP)
	$(BIN)/python bench/bench_engine.py

## make bench-operator: 100 EvaluationRuns over 10 Workloads in kyai devcluster.
bench-operator: $(STAMP)
	$(BIN)/python bench/bench_operator.py

## make e2e: the system tests against a kind cluster running the Helm chart (needs kind,
## kubectl, docker or podman, and `make image`): see README, "Real-cluster tests".
e2e: $(STAMP)
	BIN=$(BIN) bash tests/e2e/kind.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache out
