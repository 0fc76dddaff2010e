# gtbarrier: the commands the README names.
#
#   make demo    install everything, then run the demo job
#   make test    install everything, then lint, type-check and run every test
#
# Both start from `setup` (scripts/setup.sh), which is idempotent: it installs Java 17
# and Debian's zookeeper package if missing, creates .venv if missing and reinstalls
# the package when pyproject.toml changed.

VENV ?= .venv
PY := $(VENV)/bin/python
# What pytest runs, and extra arguments: `make pytest PYTEST_PATHS=tests PYTEST_ARGS="-x"`.
PYTEST_PATHS ?= tests integration_tests
PYTEST_ARGS ?=
# `make test` runs pytest on this many workers (pytest-xdist); 0 runs it in one process.
PYTEST_WORKERS ?= 2
# Extra arguments of `make bench` / `make breakdown`, e.g. BENCH_ARGS=--small.
BENCH_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup check test lint typecheck pytest unit integration volume demo bench soak soak-lifetime soak-sparse breakdown counts chaos notebooks sim

help:
	@echo "make demo       install everything and run the demo job (python -m demo)"
	@echo "make test       install everything; ruff, mypy and the whole pytest suite"
	@echo "make check      the fast lane: ruff (lint + format), mypy and the unit tests (< 2 min)"
	@echo "make setup      install only (idempotent)"
	@echo "make notebooks  run notebooks/*.ipynb and store them with their outputs"
	@echo "make sim        explore the protocol's interleavings, crashes and lost answers (~10 min)"
	@echo "make lint | typecheck | unit | integration | volume | bench | soak | soak-lifetime | soak-sparse | breakdown | counts | chaos"

setup:
	@./scripts/setup.sh

test: setup lint typecheck pytest

# The edit-test loop: everything that needs no server, in under two minutes.
check: setup lint typecheck
	$(PY) -m pytest tests -q -m unit $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m scripts.option_docs --check

typecheck: setup
	$(VENV)/bin/mypy

# Every test under tests/ and integration_tests/, all markers, on PYTEST_WORKERS workers
# (slow tests first: conftest.py); prints pytest's summary and the wall time, and exits
# with pytest's exit code (5, "no tests ran", is a failure).
pytest: setup
	@start=$$(date +%s); \
	$(PY) -m pytest $(PYTEST_PATHS) -m "not volume" -n $(PYTEST_WORKERS) --dist load \
		--maxschedchunk 1 --durations=60 $(PYTEST_ARGS); rc=$$?; \
	echo "[make test] pytest exit code $$rc, wall time $$(( $$(date +%s) - start ))s"; \
	exit $$rc

unit: setup
	$(PY) -m pytest tests integration_tests -m unit $(PYTEST_ARGS)

integration: setup
	$(PY) -m pytest integration_tests -m integration $(PYTEST_ARGS)

# The million-record runs (source and sink); their 100,000-record versions are in `make test`.
volume: setup
	$(PY) -m pytest integration_tests -m volume $(PYTEST_ARGS)

demo: setup
	$(PY) -m demo

# The performance targets side by side (docs/performance.md; about 10 min on 2 quiet
# cores): BENCH_ARGS=--small for reduced sizes. `make breakdown`: where a micro-batch's
# and a recovery's time goes.
bench: setup
	$(PY) -m benchmarks $(BENCH_ARGS)

# An hour of the demo's stateful query at a steady rate, the driver SIGKILLed every 15
# minutes: memory, fds, threads, latency and stored objects over time (docs/operations.md#soak).
# Extra arguments: SOAK_ARGS="--rate 200".
SOAK_ARGS ?=
soak: setup
	$(PY) -m benchmarks.soak --minutes 60 $(SOAK_ARGS)

# The same hour run by one driver that is never killed: does it grow? (docs/operations.md#soak)
soak-lifetime: setup
	$(PY) -m benchmarks.soak --minutes 60 --no-kills $(SOAK_ARGS)

# The never-killed driver with sparse output: a row a minute, nearly every bundle empty.
soak-sparse: setup
	$(PY) -m benchmarks.soak --minutes 60 --no-kills --sparse $(SOAK_ARGS)

breakdown: setup
	$(PY) -m benchmarks.breakdown $(BENCH_ARGS)

# Re-run the notebooks top to bottom and store them with their outputs (docs: scripts/notebooks.py).
notebooks: setup
	$(PY) -m scripts.notebooks

# Randomized fault rounds against the real servers (docs/chaos.md):
# `make chaos CHAOS_ARGS="--faults 100 --seed 7"`; the default is the quick run (~10 faults).
CHAOS_ARGS ?= --quick
chaos: setup
	$(PY) -m integration_tests.chaos $(CHAOS_ARGS)

# How many tests each marker selects (collection only, nothing runs).
counts: setup
	@$(PY) scripts/count_tests.py $(PYTEST_PATHS)

# Deterministic simulation of the protocol (simulation/README.md): a deep exploration of
# two drivers, crashes, lost store answers and consumer crashes; `make sim SIM_ARGS="--seed 7"`.
SIM_ARGS ?=
sim: setup
	$(PY) -m simulation $(SIM_ARGS)
