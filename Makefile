# The two commands of the README:
#   make chaos  - the suites against the built-in reference clients on the local backend (PostgreSQL, then the
#                 MariaDB DUR and PER suites without the slow sysbench test), then the report
#   make test   - the project's own tests (among them tests/test_installed_wheel.py: the wheel built, installed into a
#                 fresh venv in a temporary folder and used there as another project would), the persistent proxy's
#                 end-to-end tests once more on its pure-Python data path (FAILOVER_HARNESS_PURE_PYTHON=1); then a second pass:
#                 every suite of make chaos (PostgreSQL, and MariaDB's DUR + PER) on Docker Compose containers
#                 (behind the real Toxiproxy) compared with local processes, and, when
#                 $(TOXIPROXY_SERVER) (default ../shared/toxiproxy/toxiproxy-server) exists, the
#                 real Toxiproxy compared with the embedded server
#   make chaos BACKEND=compose - the same suites (PostgreSQL, then the MariaDB DUR and PER suites without the
#                 slow sysbench test) on Docker Compose containers behind the real Toxiproxy (docs/compose.md)
# Both run scripts/setup.sh first (idempotent: installs what is missing, otherwise does nothing);
# `make test` and `make chaos BACKEND=compose` also run `failover-harness compose-setup` (engine,
# Compose v2, images; idempotent) and afterwards stop the dockerd that it started, if it started one.
#   make mutation - the mutation test of the MIR, PER, ACR, ICM and LPQ checkers (docs/mutation.md); not part of make test
#   make matrix   - the LPQ suites against every registered PostgreSQL driver -> docs/matrix-lpq.md (not part of make chaos)
#   make matrix-mir - the MIR suites against the same drivers -> docs/matrix-mirroring-drivers.md
#   make matrix-app - the app suites against every registered pool -> docs/matrix-app.md
#   make chaos-ham - the HAM suites (Patroni over etcd, pg_auto_failover; suites/ham; local backend only; not part of make chaos)

VENV    := .venv
PY      := $(VENV)/bin/python
PYTEST  := $(VENV)/bin/pytest
FH      := $(VENV)/bin/failover-harness
JOBS    ?= 2
BACKEND ?= local
STOP_ENGINE := $(FH) compose-setup --stop-engine
# The real Toxiproxy 2.12 for make test's second pass (CI: a copy of shared/ beside the clone).
TOXIPROXY_SERVER ?= $(CURDIR)/../shared/toxiproxy/toxiproxy-server
REAL_PASS := tests/toxiproxy_compat tests/test_toxiproxy_real_suites.py
# Every suite of make chaos on compose against local: DUR + MIR against the same local run the real pass compares
# with (one pytest session), ACR + APP + ICM + LPQ + PER against a local run of their own, and the MariaDB
# DUR + PER suites against a local MariaDB run of their own (docs/compose.md).
COMPOSE_PASS := tests/test_compose_suites.py
# The second pass's comparisons run side by side (-n 2; an idle worker takes queued tests from the other; the one
# local DUR + MIR run two of them read runs once per session, tests/conftest.py): docs/compose.md "In make test".
SECOND_PASS_ARGS := -n $(JOBS) --dist worksteal
# The persistent proxy's end-to-end tests, run again by make test on its pure-Python framing and tracking
# (FAILOVER_HARNESS_PURE_PYTHON=1: the path of an install without a C compiler; ~80 s at -n 2, docs/persistent-proxy.md).
PURE_PYTHON_PASS := tests/test_persistent_proxy.py
# e.g. make mutation MUTATION_ARGS="--sample 60" (a fixed-seed sample per module), or "--module harness/rules/persistent.py"
MUTATION_ARGS ?=
# The LPQ matrix columns (make matrix): every registered driver but the `reference` alias of libpq.
LPQ_CLIENTS ?= libpq,libpq-system,psycopg,psycopg2,asyncpg,pg8000,node-pg,postgres-js,pgjdbc
# The same drivers against the MIR suites (make matrix-mir; host list = [Server, Failover Partner]).
MIR_DRIVER_CLIENTS ?= lpq-libpq,lpq-psycopg,lpq-psycopg2,lpq-asyncpg,lpq-postgres-js,lpq-pgjdbc
# The app matrix columns (make matrix-app): every registered pool but the `reference` alias.
APP_CLIENTS ?= sqlalchemy-preping,sqlalchemy,psycopg-pool-check,psycopg-pool,asyncpg-pool,node-pg-pool,hikaricp

.PHONY: setup compose-setup test chaos chaos-ham lint bench mutation matrix matrix-mir matrix-app clean

setup:
	@bash scripts/setup.sh

compose-setup: setup
	$(FH) compose-setup

# Whatever fails, the dockerd that compose-setup started (if any) is stopped again.
test: setup
	$(VENV)/bin/lint-imports --no-cache
	@status=0; \
	$(FH) compose-setup || status=$$?; \
	[ $$status -ne 0 ] || $(PYTEST) -n $(JOBS) --durations=15 tests --ignore=tests/test_toxiproxy_real_suites.py \
		--ignore=$(COMPOSE_PASS) || status=$$?; \
	if [ $$status -eq 0 ]; then \
		echo "== the persistent proxy's end-to-end tests on its pure-Python data path (FAILOVER_HARNESS_PURE_PYTHON=1)"; \
		FAILOVER_HARNESS_PURE_PYTHON=1 $(PYTEST) -n $(JOBS) $(PURE_PYTHON_PASS) || status=$$?; \
	fi; \
	if [ $$status -eq 0 ]; then \
		if [ -x "$(TOXIPROXY_SERVER)" ]; then \
			echo "== second pass: the real Toxiproxy $(TOXIPROXY_SERVER) (compat tests, DUR + MIR suites)" \
			     "and every suite of make chaos on compose"; \
			TOXIPROXY_SERVER_BIN="$(TOXIPROXY_SERVER)" $(PYTEST) $(SECOND_PASS_ARGS) $(REAL_PASS) $(COMPOSE_PASS) || status=$$?; \
		else \
			echo "== no real toxiproxy-server at $(TOXIPROXY_SERVER): that comparison skipped" \
			     "(make test TOXIPROXY_SERVER=/path/to/toxiproxy-server); second pass: every suite of make chaos on compose"; \
			$(PYTEST) $(SECOND_PASS_ARGS) $(COMPOSE_PASS) || status=$$?; \
		fi; \
	fi; \
	$(STOP_ENGINE); exit $$status

chaos: setup $(if $(filter compose,$(BACKEND)),compose-setup)
	$(FH) run --backend $(BACKEND) --pytest-arg=--ignore=suites/ham suites; status=$$?; \
	$(FH) run --backend $(BACKEND) --engine mariadb --append-results -m "not slow" \
		suites/durability suites/persistent || status=1; \
	$(FH) report; \
	$(if $(filter compose,$(BACKEND)),$(STOP_ENGINE);) exit $$status

# The HAM suites (real Patroni 3 + etcd, real pg_auto_failover 2.0; docs/ha-managers.md): their own target, not part of make chaos.
chaos-ham: setup
	$(FH) run --backend local suites/ham; status=$$?; $(FH) report; exit $$status

lint: setup
	$(VENV)/bin/ruff check harness tests suites benchmarks scripts
	$(VENV)/bin/lint-imports --no-cache

bench: setup
	$(PY) benchmarks/topology.py

mutation: setup
	$(PY) -m scripts.mutation --jobs $(JOBS) $(MUTATION_ARGS)

matrix: setup
	$(FH) matrix --profile lpq --clients $(LPQ_CLIENTS) --doc docs/matrix-lpq.md

matrix-mir: setup
	$(FH) matrix --profile mirroring --clients $(MIR_DRIVER_CLIENTS) --doc docs/matrix-mirroring-drivers.md

matrix-app: setup
	$(FH) matrix --profile app --clients $(APP_CLIENTS) --doc docs/matrix-app.md

clean:
	-$(FH) down --all
	rm -rf reports/allure-results reports/allure-report
