"""Fixtures for the OpenRLHF peer: real `gym-server serve` processes (tests/interop/gym_servers.py) and
the tiny model warmed up on counter tool calls (the agent peers' shared warm-up, tests/interop/
agent_policy.py, built by the project's python), generating in this process through `LocalEngine` (the
CPU stand-in for OpenRLHF's vLLM actor, which needs a GPU). The agent module, OpenRLHF's base classes
and its `MultiTurnAgentExecutor` loop are the real ones, from `openrlhf==0.11.2` installed without its
GPU dependencies (flash-attn, deepspeed, vLLM, ray), as docs/openrlhf.md says.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gym_servers import Gym, free_port, gym, gym_with

__all__ = ["Gym", "free_port", "gym", "gym_with", "warm_policy"]


def pytest_report_header() -> str:
    return f"openrlhf {version('openrlhf')} against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"


@pytest.fixture(scope="session")
def warm_policy(gym: Gym) -> tuple[Any, Any, list[dict[str, Any]]]:
    """(model, tokenizer, counter tasks): the tiny model after the agent peers' supervised warm-up, so that
    it writes `add(k)` then `submit` (two-turn episodes). The recipe's own 100 steps, run here, left
    sampled calls malformed now and then, and ran beside the other peers' warm-ups (CI, 2026-12-07: both
    tests failed on a loaded machine); the shared 300-step build is made once, before the peers start."""
    import torch
    from agent_gyms import warmed_policy

    from gym_trainer.models import load_policy

    torch.set_num_threads(1)  # the model is tiny: a second thread costs more than it gives on a shared CPU
    folder = warmed_policy(gym, os.environ["GYM_INTEROP_PYTHON"], {**os.environ, "HF_HUB_OFFLINE": "1"})
    model, tokenizer = load_policy(str(folder))
    model.eval()
    return model, tokenizer, json.loads((folder / "tasks.json").read_text())
