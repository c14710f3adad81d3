"""Fixtures for the openenv peer: real `gym-server serve` processes on loopback
(tests/interop/gym_servers.py), driven by openenv-core's own clients."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gym_servers import Gym, free_port, gym, gym_with

__all__ = ["Gym", "free_port", "gym", "gym_with"]


def pytest_report_header() -> str:
    return (
        f"openenv-core {version('openenv-core')} (client) against gym-server from "
        f"{os.environ.get('GYM_INTEROP_PYTHON')}"
    )
