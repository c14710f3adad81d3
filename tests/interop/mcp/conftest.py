"""Fixtures for the mcp peer: real `gym-server serve` processes on loopback (tests/interop/gym_servers.py),
driven by the real `mcp` client."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gym_servers import Gym, KeyedGym, anyio_backend, bearer, free_port, gym, gym_with, keyed_gym

__all__ = ["Gym", "KeyedGym", "anyio_backend", "bearer", "free_port", "gym", "gym_with", "keyed_gym"]


def pytest_report_header() -> str:
    return f"mcp {version('mcp')} (client) against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"
