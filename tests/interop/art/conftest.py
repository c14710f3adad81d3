"""Fixtures for the ART peer (openpipe-art 0.5.23, Python 3.12): real `gym-server serve` processes
(tests/interop/gym_servers.py) and the gym's CPU policy server (`gym-server policy serve`, OpenAI-
compatible) serving the tiny model warmed up on counter tool calls (the agent peers' cached warm-up,
tests/interop/agent_policy.py), so that ART's model client plays
two-turn episodes (`add`, then `submit`). The warm-up and the policy server run from the project's
python (`GYM_INTEROP_PYTHON`, with the gym's `trl` extra); ART runs here, without torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_gyms import warmed_policy
from gym_servers import Gym, free_port, gym, gym_with

__all__ = ["Gym", "Policy", "free_port", "gym", "gym_with", "policy"]

SERVED_NAME = "tiny-counter"


def pytest_report_header() -> str:
    gym_python = os.environ.get("GYM_INTEROP_PYTHON")
    return f"openpipe-art {version('openpipe-art')} against gym-server from {gym_python}"


@dataclass(frozen=True)
class Policy:
    """The running policy server: its `/v1` URL, the name it serves, the counter tasks it was warmed on."""

    url: str
    name: str
    tasks: list[dict[str, Any]]


@pytest.fixture(scope="session")
def policy(gym: Gym, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Policy]:
    python = os.environ["GYM_INTEROP_PYTHON"]
    scratch = tmp_path_factory.mktemp("tiny-counter")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # The agent peers' cached warm-up (300 steps): the recipe's 100 left most sampled calls malformed on a
    # fresh machine (2026-11-28: no two-turn episode in a group, no tool reply for RULER to see).
    folder = warmed_policy(gym, python, env)
    port = free_port()
    log = scratch / "policy.log"
    args = ["policy", "serve", "--model", str(folder), "--served-model-name", SERVED_NAME]
    process = subprocess.Popen(
        [python, "-m", "gym_server.cli.main", *args, "--threads", "1", "--port", str(port)],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Gym(f"http://127.0.0.1:{port}", process)  # a server process and its URL, as for a gym
    deadline = time.monotonic() + 300
    while not _answers(server):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"policy server not ready:\n{log.read_text()}")
        time.sleep(0.2)
    yield Policy(f"{server.url}/v1", SERVED_NAME, json.loads((folder / "tasks.json").read_text()))
    process.terminate()
    process.wait(timeout=20)


def _answers(server: Gym) -> bool:
    try:
        return server.get("/v1/models")[0] == 200
    except (urllib.error.URLError, ConnectionError):
        return False
