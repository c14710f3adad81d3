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

__all__ = [
    "Gym",
    "KeyedGym",
    "anyio_backend",
    "bearer",
    "free_port",
    "gym",
    "gym_python",
    "gym_with",
    "keyed_gym",
]

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
    key: str | None = None
    """The key `get` and `stored` send (a `read` key on a gym that requires keys)."""

    def env_url(self, env: str, facade: str, **query: object) -> str:
        """The URL of a protocol facade (`mcp`, `openenv`) of environment `env`, with a query string."""
        params = "&".join(f"{key}={value}" for key, value in query.items())
        return f"{self.url}/v1/environments/{env}/{facade}" + (f"?{params}" if params else "")

    def mcp_url(self, env: str, **query: object) -> str:
        return self.env_url(env, "mcp", **query)

    def get(self, path: str, key: str | None = None) -> tuple[int, Any]:
        """GET `path` with `key` (this gym's own `key` when None) as the Bearer header."""
        key = key or self.key
        request = urllib.request.Request(f"{self.url}{path}", headers=bearer(key) if key else {})
        try:
            # generous: an environment's first catalog request loads it, which on a loaded 2-core CI
            # machine (interop beside the stack test) took more than 10 s
            with urllib.request.urlopen(request, timeout=60) as response:
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


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class KeyedGym:
    """A gym that requires keys (`GYM_AUTH__MODE=on`) and the keys `gym-server keys create` made for it
    before it started: `episodes` for tenant `acme` (what a peer's client sends), `read` keys of `acme`
    (the gym's own `key`: the tests read acme's trajectories with it) and of another tenant, `rival`."""

    gym: Gym
    episodes: str
    rival: str
    wrong: str
    """`episodes` with its secret changed: well-formed, unknown to the gym."""


def gym_python() -> str:
    python = os.environ.get("GYM_INTEROP_PYTHON")
    if not python:
        pytest.fail(
            "GYM_INTEROP_PYTHON must name the project's python (run these through `make interop PEER=...`)"
        )
    return python


def _database_url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'gym.db'}"


def create_key(tmp: Path, tenant: str, scope: str) -> str:
    """A key made as a user makes one, `gym-server keys create`, in the database `_start(tmp)` serves."""
    args = ["keys", "create", "--tenant", tenant, "--scope", scope, "--database-url", _database_url(tmp)]
    done = subprocess.run(
        [gym_python(), "-m", "gym_server.cli.main", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _start(tmp: Path, **settings: str) -> Gym:
    python = gym_python()
    port = free_port()
    env = {
        **os.environ,
        "GYM_SERVER_NAME": f"interop-{port}",
        "GYM_DATABASE_URL": _database_url(tmp),
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
        except (urllib.error.URLError, ConnectionError, TimeoutError):  # not up yet, or a loaded machine
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


@pytest.fixture(scope="session")
def keyed_gym(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedGym]:
    """A gym with keys required, shared by the tests of how a peer's client sends one."""
    tmp = tmp_path_factory.mktemp("keyed")
    episodes, reader = create_key(tmp, "acme", "episodes"), create_key(tmp, "acme", "read")
    rival = create_key(tmp, "rival", "read")
    server = _start(tmp, GYM_AUTH__MODE="on")
    server.key = reader
    wrong = episodes[:-4] + ("aaaa" if not episodes.endswith("aaaa") else "bbbb")
    yield KeyedGym(server, episodes, rival, wrong)
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
