"""Fixtures for the openenv peer: real `gym-server serve` processes on loopback
(tests/interop/gym_servers.py), driven by openenv-core's own clients."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gym_servers import Gym, KeyedGym, bearer, free_port, gym, gym_with, keyed_gym

__all__ = ["Gym", "KeyedGym", "bearer", "free_port", "gym", "gym_with", "keyed_gym"]


def pytest_report_header() -> str:
    return (
        f"openenv-core {version('openenv-core')} (client) against gym-server from "
        f"{os.environ.get('GYM_INTEROP_PYTHON')}"
    )
