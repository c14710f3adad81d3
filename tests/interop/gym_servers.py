"""Real `gym-server serve` processes on loopback for the peers' tests, and the fixtures that start them.

Each peer's conftest imports what it needs from here (its folder's parent is put on `sys.path`). The
server runs from the project's environment (`GYM_INTEROP_PYTHON`, set by `make interop`), the tests from
the peer's venv, which holds the peer's package and no gym-server: they meet over loopback only, as a
harness and a gym do. Each server has its own SQLite file in a temporary folder; the environments the
peers play (`counter`, `workplace`) run no model code, so no sandbox backend is needed
(`unsafe-no-sandbox`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Gym", "anyio_backend", "free_port", "gym", "gym_with"]

STORE_WAIT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Gym:
    """One running gym server and what a test needs to reach it."""

    url: str
    process: subprocess.Popen[bytes]

    def env_url(self, env: str, facade: str, **query: object) -> str:
        """The URL of a protocol facade (`mcp`, `openenv`) of environment `env`, with a query string."""
        params = "&".join(f"{key}={value}" for key, value in query.items())
        return f"{self.url}/v1/environments/{env}/{facade}" + (f"?{params}" if params else "")

    def mcp_url(self, env: str, **query: object) -> str:
        return self.env_url(env, "mcp", **query)

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def stored(self, session_id: str, status: str) -> dict[str, Any]:
        """The stored trajectory once it has `status` (the writer batches, so poll to a deadline)."""
        deadline = time.monotonic() + STORE_WAIT_S
        while True:
            code, body = self.get(f"/v1/rollouts/{session_id}")
            if code == 200 and body["status"] == status:
                return dict(body)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"trajectory {session_id} not {status} after {STORE_WAIT_S} s: {code} {body}"
                )
            time.sleep(0.05)


def _start(tmp: Path, **settings: str) -> Gym:
    python = os.environ.get("GYM_INTEROP_PYTHON")
    if not python:
        pytest.fail(
            "GYM_INTEROP_PYTHON must name the project's python (run these through `make interop PEER=...`)"
        )
    port = free_port()
    env = {
        **os.environ,
        "GYM_SERVER_NAME": f"interop-{port}",
        "GYM_DATABASE_URL": f"sqlite:///{tmp / 'gym.db'}",
        "GYM_STORE__FLUSH_INTERVAL_S": "0.02",
        "GYM_SANDBOX__BACKEND": "unsafe-no-sandbox",
        **settings,
    }
    args = [python, "-m", "gym_server.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)]
    log = (tmp / "server.log").open("wb")
    process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    gym = Gym(f"http://127.0.0.1:{port}", process)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"gym-server exited with {process.returncode}:\n{(tmp / 'server.log').read_text()}"
            )
        try:
            if gym.get("/readyz")[0] == 200:
                return gym
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("gym-server did not become ready in 60 s")


def _stop(gym: Gym) -> None:
    gym.process.terminate()
    try:
        gym.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        gym.process.kill()
        gym.process.wait()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def gym(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gym]:
    """A gym with default limits, shared by the tests that need nothing special."""
    server = _start(tmp_path_factory.mktemp("gym"))
    yield server
    _stop(server)


@pytest.fixture
def gym_with(tmp_path: Path) -> Iterator[Callable[..., Gym]]:
    """Start a gym with settings of the test's own (`GYM_...` variables), stopped after the test."""
    started: list[Gym] = []

    def start(**settings: str) -> Gym:
        folder = tmp_path / f"gym{len(started)}"
        folder.mkdir()
        server = _start(folder, **settings)
        started.append(server)
        return server

    yield start
    for server in started:
        _stop(server)
