# The README's two commands: `make demo` (the main job) and `make test` (everything CI checks).
# Both set up what they need on a fresh machine: a virtualenv in .venv with the project installed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo demo-pg broker test lint bench clean

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
JARS := /usr/share/java/postgresql.jar /usr/share/java/sqlite-jdbc.jar

CHROMIUM := /usr/bin/chromium

setup: $(VENV)/.installed $(JARS)

# The reconciliation job reads the stores over JDBC: Debian's drivers (Java 17 is on the machine).
$(JARS):
	$(SUDO) apt-get install -y -q libpostgresql-jdbc-java libxerial-sqlite-jdbc-java \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q \
	      libpostgresql-jdbc-java libxerial-sqlite-jdbc-java)

# The console's browser tests drive Debian's chromium with Playwright (which downloads no browser).
$(CHROMIUM):
	$(SUDO) apt-get install -y -q chromium \
	  || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,spark]"
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

test: lint $(CHROMIUM)
	$(BIN)/pytest

bench: setup
	$(BIN)/python bench/broker_bench.py
	$(BIN)/python bench/checkback_bench.py
	$(BIN)/python bench/consumer_bench.py
	$(BIN)/python bench/framework_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
