# The two commands of the README:
#   make chaos  - the suites against the built-in reference clients on the local backend, then the report
#   make test   - the project's own tests
#   make chaos BACKEND=compose - the same suites on Docker Compose containers behind the real Toxiproxy
# Both run scripts/setup.sh first (idempotent: installs what is missing, otherwise does nothing);
# `make test` and `make chaos BACKEND=compose` also run `make compose-setup` (engine, Compose v2,
# images; idempotent) and stop afterwards the dockerd that it started, if it started one.

VENV    := .venv
PY      := $(VENV)/bin/python
PYTEST  := $(VENV)/bin/pytest
FH      := $(VENV)/bin/failover-harness
JOBS    ?= 2
BACKEND ?= local
STOP_ENGINE := $(FH) compose-setup --stop-engine

.PHONY: setup compose-setup test chaos lint bench clean

setup:
	@bash scripts/setup.sh

compose-setup: setup
	$(FH) compose-setup

test: setup compose-setup
	$(VENV)/bin/lint-imports --no-cache
	$(PYTEST) -n $(JOBS) tests; status=$$?; $(STOP_ENGINE); exit $$status

chaos: setup $(if $(filter compose,$(BACKEND)),compose-setup)
	$(FH) run --backend $(BACKEND) suites; status=$$?; $(FH) report; \
	$(if $(filter compose,$(BACKEND)),$(STOP_ENGINE);) exit $$status

lint: setup
	$(VENV)/bin/ruff check harness tests suites benchmarks scripts
	$(VENV)/bin/lint-imports --no-cache

bench: setup
	$(PY) benchmarks/topology.py

clean:
	-$(FH) down --all
	rm -rf reports/allure-results reports/allure-report
