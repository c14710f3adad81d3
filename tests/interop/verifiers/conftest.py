"""Fixtures for the verifiers peer: real `gym-server serve` and `gym-server policy serve` processes on
loopback, played by the real verifiers 0.4 through this repository's taskset plugin.

The servers run from the project's environment (`GYM_INTEROP_PYTHON`, set by `make interop`), the
tests from this peer's venv, which holds verifiers and `gym-server-verifiers` and no gym-server: they
meet over HTTP only. verifiers runs its chat harness as a PEP 723 script that `uv` installs (from
PyPI, once per machine), so this venv's `bin` goes first on PATH for its `uv`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

STORE_WAIT_S = 30.0
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


def pytest_report_header() -> str:
    return f"verifiers {version('verifiers')} against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@dataclass
class Server:
    """One server process started from the project's python, and its URL."""

    url: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def stored(self, session_id: str) -> dict[str, Any]:
        """The gym's stored trajectory of a session once it is closed (the writer batches: poll)."""
        deadline = time.monotonic() + STORE_WAIT_S
        while True:
            code, body = get_json(f"{self.url}/v1/rollouts/{session_id}")
            if code == 200 and body["status"] != "live":
                return dict(body)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"trajectory {session_id} not closed after {STORE_WAIT_S} s: {code} {body}"
                )
            time.sleep(0.05)


def _start(folder: Path, args: list[str], ready: str, env: dict[str, str]) -> Server:
    python = os.environ.get("GYM_INTEROP_PYTHON")
    if not python:
        pytest.fail("GYM_INTEROP_PYTHON must name the project's python (run `make interop PEER=verifiers`)")
    port = free_port()
    log = folder / "server.log"
    process = subprocess.Popen(
        [python, "-m", "gym_server.cli.main", *args, "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Server(f"http://127.0.0.1:{port}", process)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{args[0]} exited with {process.returncode}:\n{log.read_text()}")
        try:
            if get_json(f"{server.url}{ready}")[0] == 200:
                return server
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"{args[0]} did not become ready in 120 s:\n{log.read_text()}")


def start_gym(folder: Path) -> Server:
    """A gym on its own SQLite file; `counter` runs no model code, so no sandbox backend is needed."""
    env = {
        "GYM_SERVER_NAME": f"interop-verifiers-{folder.name}",
        "GYM_DATABASE_URL": f"sqlite:///{folder / 'gym.db'}",
        "GYM_STORE__FLUSH_INTERVAL_S": "0.02",
        "GYM_SANDBOX__BACKEND": "unsafe-no-sandbox",
    }
    return _start(folder, ["serve"], "/readyz", env)


@pytest.fixture(scope="session")
def gym(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_gym(tmp_path_factory.mktemp("gym"))
    yield server
    server.stop()


@pytest.fixture
def gym_of_its_own(tmp_path: Path) -> Iterator[Server]:
    """A gym for a test that stops it."""
    folder = tmp_path / "gym"
    folder.mkdir()
    server = start_gym(folder)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The gym's own CPU policy server (`gym-server policy serve --model tiny`): a 2-layer Llama
    built from a config with random weights, OpenAI-compatible; it needs the gym's `trl` extra."""
    args = ["policy", "serve", "--model", "tiny", "--threads", "1"]
    server = _start(tmp_path_factory.mktemp("policy"), args, "/v1/models", {"HF_HUB_OFFLINE": "1"})
    yield server
    server.stop()


@pytest.fixture
def eval_config(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """The data of a verifiers `EvalConfig` playing `counter` on `gym` with the policy at `policy`."""

    def make(gym: Server, policy: str, model: str, *, run: str, **taskset: Any) -> dict[str, Any]:
        return {
            "env": {
                "taskset": {
                    "id": "gym-server-verifiers",
                    "env": "counter",
                    **taskset,
                    "task": {"base_url": gym.url, "run": run},
                },
                "agent": {"runtime": {"type": "subprocess"}},
            },
            "model": model,
            "client": {"type": "eval", "base_url": policy, "api_key_var": "GYM_INTEROP_POLICY_KEY"},
            "sampling": {"max_tokens": 24, "seed": 0},
            "push": False,
            "rich": None,
            "output_dir": str(tmp_path / "outputs"),
            "run": {"name": run},
        }

    return make
