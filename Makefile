# KYAI Operator: developer entry points. Every target sets up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test lint typecheck unit demo bench bench-operator crds mutation clean

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

## make mutation: mutation testing (mutmut 3) of the modules that decide scores and safety;
## prints the kill rate per module and the surviving mutants. Not part of CI (slow on 2 cores).
## Its own venv, so mutmut never lands in the test path. Pick groups and workers with e.g.
## `make mutation MUTATION_ARGS="graders --jobs 2"`; see docs/mutation.md.
MUTATION_VENV ?= .venv-mutation
MUTATION_ARGS ?=

$(MUTATION_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(MUTATION_VENV)
	$(MUTATION_VENV)/bin/pip install --quiet --upgrade pip
	$(MUTATION_VENV)/bin/pip install --quiet -e '.[dev,mutation]'
	touch $@

mutation: $(MUTATION_VENV)/.installed
	$(MUTATION_VENV)/bin/python scripts/mutation.py $(MUTATION_ARGS)

clean:
	rm -rf $(VENV) $(MUTATION_VENV) .mutation .mypy_cache .ruff_cache .pytest_cache out
