"""Fixtures for the nemo-gym peer: real `gym-server serve` processes on loopback
(tests/interop/gym_servers.py), driven by NeMo Gym's own client code (nemo-gym 0.4.0: `ServerClient`,
its aiohttp `request`, the `SimpleAgent`).

NeMo Gym runs from this peer's Python 3.12 venv, which holds nemo-gym and no gym-server: they meet over
HTTP only, as a NeMo Gym agent and a resources server do. NeMo Gym's agent and a scripted policy run as
one more process (`nemo_servers.py`), since NeMo Gym's global aiohttp client belongs to one event loop.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gym_servers import Gym, KeyedGym, anyio_backend, bearer, free_port, gym, gym_with, keyed_gym

__all__ = [
    "Gym",
    "KeyedGym",
    "NemoResources",
    "NemoServers",
    "anyio_backend",
    "bearer",
    "free_port",
    "gym",
    "gym_with",
    "keyed_gym",
    "keyed_nemo_servers",
    "nemo_resources",
    "nemo_servers",
]

HERE = Path(__file__).parent


def pytest_report_header() -> str:
    return f"nemo-gym {version('nemo-gym')} against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"


@dataclass
class NemoServers:
    """NeMo Gym's simple agent (and its scripted policy) serving one gym environment."""

    agent_port: int
    policy_port: int
    process: subprocess.Popen[bytes]


@pytest.fixture
def nemo_servers(gym: Gym, tmp_path: Path) -> Iterator[NemoServers]:
    yield from _nemo_servers(gym, tmp_path, {})


@pytest.fixture
def keyed_nemo_servers(keyed_gym: KeyedGym, tmp_path: Path) -> Iterator[NemoServers]:
    """The agent on a gym that requires keys, given acme's `episodes` key as a NeMo Gym user would."""
    yield from _nemo_servers(keyed_gym.gym, tmp_path, {"GYM_API_KEY": keyed_gym.episodes})


def _nemo_servers(gym: Gym, tmp_path: Path, env: dict[str, str]) -> Iterator[NemoServers]:
    agent_port, policy_port = free_port(), free_port()
    log = (tmp_path / "nemo.log").open("wb")
    args = [
        sys.executable,
        str(HERE / "nemo_servers.py"),
        gym.url,
        "counter",
        str(agent_port),
        str(policy_port),
    ]
    process = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, cwd=HERE, env={**os.environ, **env}
    )
    deadline = time.monotonic() + 60
    while not all(_listening(port) for port in (agent_port, policy_port)):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"NeMo Gym's servers did not start:\n{(tmp_path / 'nemo.log').read_text()}")
        time.sleep(0.1)
    yield NemoServers(agent_port, policy_port, process)
    process.terminate()
    process.wait(timeout=20)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class NemoResources:
    """One of nemo-gym's own resources servers, running as its own process, and its manifest for the gym."""

    url: str
    manifest: Path
    process: subprocess.Popen[bytes]


# nemo-gym 0.4.0's example_session_state_mgmt: a counter kept per NeMo Gym session (its cookie), tools
# `increment_counter` and `get_counter_value`, reward 1 when the count equals the row's `expected_count`.
SESSION_STATE = "resources_servers.example_session_state_mgmt.app"


@pytest.fixture
def nemo_resources(tmp_path: Path) -> Iterator[NemoResources]:
    port = free_port()
    log = (tmp_path / "resources.log").open("wb")
    target = f"{SESSION_STATE}:StatefulCounterResourcesServer"
    args = [sys.executable, str(HERE / "serve_resources.py"), target, str(port)]
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=HERE)
    deadline = time.monotonic() + 60
    while not _listening(port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(
                f"the resources server did not start:\n{(tmp_path / 'resources.log').read_text()}"
            )
        time.sleep(0.1)
    rows = Path(importlib.import_module(SESSION_STATE).__file__ or "").parent / "data" / "example.jsonl"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "name": "session_state",
                "description": "nemo-gym 0.4.0's example_session_state_mgmt resources server",
                "server": {"url": f"http://127.0.0.1:{port}", "timeout_s": 10},
                "splits": {"example": str(rows)},
            }
        )
    )
    yield NemoResources(f"http://127.0.0.1:{port}", manifest, process)
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=20)
