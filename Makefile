# MARLForge: `make up` starts the service with embedded defaults, `make test` runs the whole suite.
# Both create .venv and install the project (all three backends) from pyproject.toml first.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EXTRAS := torch,tensorflow,mindspore,tracking,dev
# Test workers: one more than the cores this process may use (up to 8). Many tests wait on the
# processes they start (workers, servers, leases that lapse), so a third worker on two cores took
# the suite from 24 m 49 s to 20-22 min (docs/results/2026-12-06-test-workers.md).
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(len(os.sched_getaffinity(0)) + 1, 8))")
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml examples/gridcoop/pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install up test test-fast lint typecheck chromium benchmarks clean

$(STAMP): pyproject.toml examples/gridcoop/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	# The example environment plugin (docs/environments.md): the tests train it through the API.
	$(BIN)/python -m pip install --quiet -e examples/gridcoop
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## Start the API on http://127.0.0.1:8000 and one local worker (SQLite + embedded broker under ./var).
up: install
	$(BIN)/marlforge up

## The whole test suite, on TEST_WORKERS workers (PostgreSQL and Redis from MARLFORGE_DATABASE_URL
## and MARLFORGE_BROKER_URL or the local defaults).
test: install chromium
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25

## Everything but the slow tests.
test-fast: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not slow"

lint: install
	$(BIN)/ruff check marlforge api core workers learners client tests benchmarks scripts

typecheck: install
	$(BIN)/mypy marlforge api core workers learners client
	$(BIN)/lint-imports

## Debian's Chromium for the dashboard tests (never a downloaded browser build).
chromium:
	./scripts/install-chromium.sh

clean:
	rm -rf $(VENV) var .pytest_cache
