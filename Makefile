# slurmpool developer targets. CI (.ci/run) calls the same ones.
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: help install lint format typecheck test test-unit test-integration bench package-test demo clean

help:
	@echo "make install        editable install with dev tools"
	@echo "make demo           sandbox Slurm cluster with simulated GPUs, run jobs, show the pool"
	@echo "make test           unit + integration tests (integration needs Slurm, see README)"
	@echo "make lint           ruff (lint + format check) and mypy"
	@echo "make bench          benchmarks (placement, generate-config, ...)"
	@echo "make package-test   build a wheel, install it in a fresh venv, run it elsewhere"

install:
	$(PYTHON) -m pip install -q -e '.[dev]'

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy

format:
	$(PYTHON) -m ruff format .
	$(PYTHON) -m ruff check --fix .

typecheck:
	$(PYTHON) -m mypy

test:
	$(PYTHON) -m pytest -q $(PYTEST_ARGS)

test-unit:
	$(PYTHON) -m pytest -q --ignore=tests/integration $(PYTEST_ARGS)

test-integration:
	$(PYTHON) -m pytest -q tests/integration $(PYTEST_ARGS)

bench:
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PYTHON) $$b || exit 1; done

package-test:
	bash .ci/package-test

demo:
	bash examples/demo.sh

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache
