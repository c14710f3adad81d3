"""Fixtures for the verifiers peer: real `gym-server serve` (tests/interop/gym_servers.py) and
`gym-server policy serve` processes on loopback, played by the real verifiers 0.4 through this
repository's taskset plugin (`integrations/verifiers`).

verifiers runs its chat harness as a PEP 723 script that `uv` installs (from PyPI, once per machine),
so this venv's `bin` goes first on PATH for its `uv`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gym_servers import Gym, KeyedGym, bearer, free_port, gym, gym_with, keyed_gym

__all__ = [
    "Gym",
    "KeyedGym",
    "bearer",
    "eval_config",
    "free_port",
    "gym",
    "gym_with",
    "keyed_gym",
    "tiny_policy",
]

os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


def pytest_report_header() -> str:
    return f"verifiers {version('verifiers')} against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gym's own CPU policy server (`gym-server policy serve --model tiny`: a 2-layer Llama built
    from a config, random weights), OpenAI-compatible; it needs the gym's `trl` extra. Its `/v1` URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("policy") / "policy.log"
    args = ["policy", "serve", "--model", "tiny", "--threads", "1", "--port", str(port)]
    python = os.environ["GYM_INTEROP_PYTHON"]
    process = subprocess.Popen(
        [python, "-m", "gym_server.cli.main", *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    policy = Gym(f"http://127.0.0.1:{port}", process)  # a server process and its URL, as for a gym
    deadline = time.monotonic() + 120
    while not _answers(policy, "/v1/models"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"policy server not ready:\n{log.read_text()}")
        time.sleep(0.2)
    yield f"{policy.url}/v1"
    process.terminate()
    process.wait(timeout=20)


def _answers(server: Gym, path: str) -> bool:
    try:
        return server.get(path)[0] == 200
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.fixture
def eval_config(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """The data of a verifiers `EvalConfig` playing `counter` on `gym` with the policy at `policy`."""

    def make(gym: Gym, policy: str, model: str, *, run: str, **taskset: Any) -> dict[str, Any]:
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
