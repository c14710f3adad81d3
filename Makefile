# The two commands of the README. Both install what they need, so they work on a fresh machine.
PYTHON ?= python3

.PHONY: serve test lint install install-dev

install:
	$(PYTHON) -m pip install -q -e .

install-dev:
	$(PYTHON) -m pip install -q -e ".[dev]"

## Run the gym server on the embedded default (SQLite at var/gym.db) on http://127.0.0.1:8000
serve: install
	gym-server serve

lint:
	ruff check .
	ruff format --check .
	mypy gym_server

## Lint, type-check and run every test (needs the PostgreSQL on loopback; see .ci/ensure-services.sh)
test: install-dev
	bash .ci/ensure-services.sh
	$(MAKE) lint
	$(PYTHON) -m pytest -q -p no:cacheprovider
