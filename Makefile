# slurmpool developer targets. CI (.ci/run) calls the same ones.
#
# Everything runs in the venv scripts/setup-host makes (as root, on Debian) and keeps
# in step with this checkout.  Elsewhere, or in a venv of your own:
#   make test SETUP=no PYTHON=/path/to/venv/bin/python
VENV ?= /opt/slurmpool
PYTHON ?= $(VENV)/bin/python
SETUP ?= yes
PYTEST_ARGS ?=

.PHONY: help setup lint format typecheck test test-unit test-integration soak bench package-test fresh-check matrix demo clean

help:
	@echo "make setup          Debian packages + the $(VENV) venv with every test need (root)"
	@echo "make demo           sandbox Slurm cluster with simulated GPUs, run jobs, show the pool"
	@echo "make test           unit + integration tests (integration needs Slurm, see README)"
	@echo "make lint           ruff (lint + format check) and mypy"
	@echo "make soak           churn rounds with random seeds on the sandbox for SOAK_S seconds"
	@echo "                    (default 1800; SOAK_SEED=N replays a seed; counts in soak-report.json)"
	@echo "make bench          benchmarks (placement, generate-config, ...)"
	@echo "make package-test   build a wheel, install it in a fresh venv, run it elsewhere"
	@echo "make fresh-check    make demo and make test, literally, in a fresh minimal Debian root"
	@echo "make matrix         make test and make demo on newer Slurm and Python: Debian trixie, sid"
	@echo "                    (SLURMPOOL_SLURM_ROOT=trixie for one; see .ci/matrix)"

# Debian packages and the venv with every test need (dev and report extras, Lua 5.1).
setup:
ifeq ($(SETUP),yes)
	@SETUP_HOST_TARGET=test bash scripts/setup-host --test
endif

lint: setup
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy

format: setup
	$(PYTHON) -m ruff format .
	$(PYTHON) -m ruff check --fix .

typecheck: setup
	$(PYTHON) -m mypy

# With the set-up done here, a test that cannot run is a failure, not a skip.
STRICT := $(if $(filter yes,$(SETUP)),SLURMPOOL_STRICT_TESTS=1)

test: setup
	$(STRICT) $(PYTHON) -m pytest -q $(PYTEST_ARGS)

test-unit: setup
	$(STRICT) $(PYTHON) -m pytest -q --ignore=tests/integration $(PYTEST_ARGS)

test-integration: setup
	$(STRICT) $(PYTHON) -m pytest -q tests/integration $(PYTEST_ARGS)

# Churn rounds (tests/integration/churn.py), each with a new seed, until SOAK_S seconds pass.
SOAK_S ?= 1800
SOAK_SEED ?=
soak: setup
	SLURMPOOL_SOAK_S=$(SOAK_S) SLURMPOOL_SOAK_SEED=$(SOAK_SEED) \
	SLURMPOOL_SOAK_REPORT=$(CURDIR)/soak-report.json \
	$(STRICT) $(PYTHON) -m pytest -q -s tests/integration/test_churn.py -k test_soak $(PYTEST_ARGS)

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PYTHON) $$b || exit 1; done

package-test: setup
	PYTHON=$(PYTHON) bash .ci/package-test

demo:
	bash examples/demo.sh

# The README's two commands, literally, in a fresh minimal Debian root (root, mmdebstrap).
fresh-check:
	bash .ci/fresh-check

matrix:
	bash .ci/matrix

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache
