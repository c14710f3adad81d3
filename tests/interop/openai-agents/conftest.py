"""Fixtures for the openai-agents peer: real `gym-server serve` processes (tests/interop/gym_servers.py)
and the warmed tiny policy behind a recording proxy (tests/interop/agent_gyms.py). The OpenAI Agents SDK
(with its own `openai` and `mcp` clients) runs here; the gym's trainer-side helper
(`gym_trainer.agents`, the base install) opens the episodes."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_gyms import Policy, policy
from gym_servers import Gym, anyio_backend, gym

__all__ = ["Gym", "Policy", "anyio_backend", "gym", "policy"]


def pytest_report_header() -> str:
    found = ", ".join(f"{name} {version(name)}" for name in ("openai-agents", "openai", "mcp"))
    return f"{found} against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"
