"""An OpenEnv environment run by the gym: `guess_env.py` (openenv-core's base classes and `create_app`)
served by OpenEnv's own server process from this peer's venv, registered in a gym through the OpenEnv
manifest (environments/openenv), and played through the gym's native API."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import Gym, free_port

HERE = Path(__file__).resolve().parent
TASKS = [
    {"id": "guess-0000", "prompt": "Find the number.", "metadata": {"reset": {"seed": 7}}},
    {"id": "guess-0001", "prompt": "Find the number.", "metadata": {"reset": {"seed": 8}}},
]


@pytest.fixture
def openenv_server(tmp_path: Path) -> Iterator[str]:
    """OpenEnv's own server for guess_env, from this venv, on a loopback port."""
    port = free_port()
    log = (tmp_path / "openenv.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "guess_env:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=HERE,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"OpenEnv server did not start:\n{(tmp_path / 'openenv.log').read_text()}")
        time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(timeout=20)


@pytest.fixture
def gym_with_guess(tmp_path: Path, openenv_server: str, gym_with: Any) -> Gym:
    dataset = tmp_path / "guess-tasks"
    dataset.mkdir()
    (dataset / "train.jsonl").write_text("".join(json.dumps(task) + "\n" for task in TASKS))
    manifest = tmp_path / "openenv.toml"
    manifest.write_text(
        "[[environment]]\n"
        'name = "guess"\n'
        f'url = "{openenv_server}"\n'
        f'dataset = "{dataset}"\n'
        'description = "Guess a number (an OpenEnv environment)"\n'
        "max_turns = 20\n"
    )
    server: Gym = gym_with(GYM_OPENENV_MANIFEST=str(manifest))
    return server


def act(gym: Gym, session_id: str, action: Any) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "tool_calls": [
            {"type": "function", "function": {"name": "act", "arguments": json.dumps({"action": action})}}
        ],
    }
    response = requests.post(
        f"{gym.url}/v1/sessions/{session_id}/step", json={"message": message}, timeout=30
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_gym_plays_an_openenv_environment_and_stores_its_reward(gym_with_guess: Gym) -> None:
    gym = gym_with_guess
    code, catalog = gym.get("/v1/environments/openenv/guess")
    assert code == 200, catalog
    assert [tool["function"]["name"] for tool in catalog["tools"]] == ["act"]
    created = requests.post(
        f"{gym.url}/v1/sessions", json={"env": "openenv/guess", "task_id": "guess-0000"}, timeout=30
    )
    assert created.status_code == 201, created.text
    session = created.json()
    session_id = session["session_id"]
    opening = json.loads(session["messages"][-1]["content"])  # OpenEnv's reset observation
    assert opening["observation"]["hint"] == "guess a number from 1 to 100"

    refused = act(
        gym, session_id, {"guess": "lots"}
    )  # malformed: OpenEnv's VALIDATION_ERROR, as a tool error
    assert refused["messages"][0]["content"].startswith("Error: the environment refused the action")
    assert "VALIDATION_ERROR" in refused["messages"][0]["content"]
    assert refused["done"] is False

    low, high, answer = 1, 100, None
    for _ in range(10):
        guess = (low + high) // 2
        answer = act(gym, session_id, {"guess": guess})
        observation = json.loads(answer["messages"][0]["content"])
        if observation["done"]:
            break
        if observation["observation"]["hint"] == "higher":
            low = guess + 1
        else:
            high = guess - 1
    assert answer is not None and answer["done"] is True
    assert answer["reward"] == 1.0
    assert requests.delete(f"{gym.url}/v1/sessions/{session_id}", timeout=30).status_code == 204
    stored = gym.stored(session_id, "completed")
    assert stored["reward"] == 1.0
    assert stored["env"] == "openenv/guess"
    assert stored["components"] == {"last_reward": 1.0, "done": 1.0}
    assert stored["verify_info"]["rewards"][-1] == 1.0
    assert stored["num_turns"] == len(stored["verify_info"]["rewards"]) + 1  # and the refused action


def test_an_episode_the_client_abandons_closes_its_openenv_session(gym_with_guess: Gym) -> None:
    gym = gym_with_guess
    # The OpenEnv server holds at most 4 sessions: 6 episodes opened and closed in turn must all fit.
    for seed in range(6):
        created = requests.post(
            f"{gym.url}/v1/sessions",
            json={"env": "openenv/guess", "task_id": "guess-0001", "seed": seed},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        session_id = created.json()["session_id"]
        act(gym, session_id, {"guess": 50})
        assert requests.delete(f"{gym.url}/v1/sessions/{session_id}", timeout=30).status_code == 204
        assert gym.stored(session_id, "abandoned")["num_turns"] == 1
