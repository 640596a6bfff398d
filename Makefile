# The two commands of the README:
#   make chaos  - the suites against the built-in reference clients on the local backend, then the report
#   make test   - the project's own tests
# Both run scripts/setup.sh first (idempotent: installs what is missing, otherwise does nothing).
#   make mutation - the mutation test of the MIR and PER checkers (docs/mutation.md); not part of make test

VENV    := .venv
PY      := $(VENV)/bin/python
PYTEST  := $(VENV)/bin/pytest
FH      := $(VENV)/bin/failover-harness
JOBS    ?= 2
# e.g. make mutation MUTATION_ARGS="--sample 60" (a fixed-seed sample per module), or "--module harness/rules/persistent.py"
MUTATION_ARGS ?=

.PHONY: setup test chaos lint bench mutation clean

setup:
	@bash scripts/setup.sh

test: setup
	$(VENV)/bin/lint-imports --no-cache
	$(PYTEST) -n $(JOBS) tests

chaos: setup
	$(FH) run --backend local suites; status=$$?; $(FH) report; exit $$status

lint: setup
	$(VENV)/bin/ruff check harness tests suites benchmarks scripts
	$(VENV)/bin/lint-imports --no-cache

bench: setup
	$(PY) benchmarks/topology.py

mutation: setup
	$(PY) -m scripts.mutation --jobs $(JOBS) $(MUTATION_ARGS)

clean:
	-$(FH) down --all
	rm -rf reports/allure-results reports/allure-report
