"""Fixtures for the langgraph peer: real `gym-server serve` processes (tests/interop/gym_servers.py) and
the warmed tiny policy behind a recording proxy (tests/interop/agent_gyms.py). LangGraph, langchain-openai
and langchain-mcp-adapters (with its `mcp<2` client) run here, beside TRL and torch (the GRPO test); the
gym's trainer-side helpers (`gym_trainer`, the base install) open the episodes; the GRPO
recipe is the suite's own (tests/grpotest.py)."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # tests/: grpotest, the suite's GRPO recipe

from agent_gyms import Policy, policy
from gym_servers import Gym, anyio_backend, gym

__all__ = ["Gym", "Policy", "anyio_backend", "gym", "policy"]


def pytest_report_header() -> str:
    names = ("langgraph", "langchain-openai", "langchain-mcp-adapters", "mcp", "trl", "torch")
    found = ", ".join(f"{name} {version(name)}" for name in names)
    return f"{found} against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"
