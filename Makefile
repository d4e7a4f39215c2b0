# The README's two commands: `make demo` (the main job) and `make test` (everything CI checks).
# Both set up what they need on a fresh machine: a virtualenv in .venv with the project installed.
# `make demo` needs no system package manager and no sudo: only Python 3.11+ (and Java 17 for its
# Spark reconciliation, which is skipped with a note without it).  `make test` also installs Debian
# packages (CI runs as root) and says which before it does.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo demo-pg broker test test-unit lint bench client-check clean

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
JARS := /usr/share/java/postgresql.jar /usr/share/java/sqlite-jdbc.jar

CHROMIUM := /usr/bin/chromium

setup: $(VENV)/.installed

# The reconciliation tests read stores over JDBC: Debian's drivers (Java 17 is on the machine).
# The demo does not need them: on SQLite its reconciliation reads the Parquet export.
$(JARS):
	@echo "== make test: installing the JDBC drivers (apt-get: libpostgresql-jdbc-java" \
	  "libxerial-sqlite-jdbc-java) for the reconciliation tests"
	$(SUDO) apt-get install -y -q libpostgresql-jdbc-java libxerial-sqlite-jdbc-java \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q \
	      libpostgresql-jdbc-java libxerial-sqlite-jdbc-java)

# The console's browser tests drive Debian's chromium with Playwright (which downloads no browser).
$(CHROMIUM):
	@echo "== make test: installing chromium (apt-get) for the console's browser tests"
	$(SUDO) apt-get install -y -q chromium \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)

# Everything the tests need: the client (`pip install halfmq`), the broker (`[broker]`), the
# reconciliation (`[spark]`) and the tools (`[dev]`; README, "Install").
# pip shows what it downloads and installs: about 940 MB (pyspark is most of it), 1-2 minutes.
$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || echo "== creating the virtualenv $(VENV)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "== upgrading pip in $(VENV)"
	$(BIN)/python -m pip install --upgrade pip
	@echo "== installing halfmq with its broker, spark and dev extras into $(VENV)" \
	  "(about 940 MB, 1-2 minutes)"
	$(BIN)/python -m pip install -e ".[broker,spark,dev]"
	@echo "== $(VENV) is ready"
	touch $@

# The main job: the Bob-to-Smith demo (broker and both banks as real processes, faults injected,
# the invariants read back from both banks' databases), on SQLite files in ./halfmq-demo.
demo: setup
	$(BIN)/halfmq demo

demo-pg: setup
	$(BIN)/halfmq demo --store postgresql

broker: setup
	$(BIN)/halfmq broker serve

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The gRPC tests drive RocketMQ's unmodified Node.js client too: npm installs it (Node 18+) as the
# lock file pins it, into tests/acceptance/grpc/node/node_modules.
NODE_CLIENT := tests/acceptance/grpc/node
$(NODE_CLIENT)/node_modules/.installed: $(NODE_CLIENT)/package-lock.json
	@echo "== make test: installing the RocketMQ Node.js client (npm ci) for the gRPC tests"
	cd $(NODE_CLIENT) && npm ci --no-audit --no-fund
	touch $@

# The suite in three tiers (docs/testing.md): tests/unit (the domain on the in-memory store, no
# database, no process), tests/integration (the store contract on each backend, the API on one
# store) and tests/acceptance (real processes, failover, Spark, the browser, RocketMQ's clients).
# `make test` runs all three in TEST_WORKERS pytest-xdist workers (every test has its own
# directory, SQLite file, PostgreSQL schema or database, and ports); TEST_WORKERS=0 runs the suite
# in pytest's own process. --dist worksteal hands each worker a run of neighbouring tests (a
# module's tests share its module-scoped broker or browser) and lets an idle worker take half of a
# busy one's rest; tests/conftest.py puts the longest tests at the heads of those runs, so that
# each worker starts with its share of them and none starts last.
TEST_WORKERS ?= 3
TIERS := tests/acceptance tests/integration tests/unit
test: lint $(JARS) $(CHROMIUM) $(NODE_CLIENT)/node_modules/.installed
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal $(TIERS)

# The first tier alone: no database, no process, no network (under a minute).
test-unit: setup
	$(BIN)/pytest tests/unit

# The client alone (no extra) in a throwaway virtualenv: none of the broker's libraries, and the
# README's producer and consumer run against a broker of $(VENV) (drills/client_only.py; 1-2 min).
client-check: setup
	$(BIN)/python -m drills.client_only

bench: setup
	$(BIN)/python bench/broker_bench.py
	$(BIN)/python bench/checkback_bench.py
	$(BIN)/python bench/consumer_bench.py
	$(BIN)/python bench/framework_bench.py
	$(BIN)/python bench/peer_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
