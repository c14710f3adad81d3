"""The `gym-server-verifiers` taskset on a gym that requires keys: the key (`task.api_key`, else
`GYM_API_KEY`) is the Bearer header of every gym call, from the task listing through the episode's
steps in verifiers' tool server to the close; episodes are stored under the key's tenant; no key or a
wrong one is a `GymError` with the gym's 401 detail; the key is in none of verifiers' outputs or logs."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gym_server_verifiers
import pytest
import verifiers.v1 as vf
from conftest import KeyedGym
from gym_server_verifiers import GymError
from scripted_policy import serve_scripted_policy
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig


def files_holding(folder: Path, secret: str) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]


def test_with_task_api_key_an_eval_plays_under_the_keys_tenant_and_logs_no_key(
    keyed_gym: KeyedGym,
    eval_config: Callable[..., dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GYM_API_KEY", raising=False)
    gym, key = keyed_gym.gym, keyed_gym.episodes
    caplog.set_level(logging.DEBUG)
    with serve_scripted_policy() as url:
        data = eval_config(gym, url, "scripted", run="vf-keys", task_ids=["counter-0000"])
        data["env"]["taskset"]["task"]["api_key"] = key
        episodes = asyncio.run(run_eval(EvalConfig.model_validate(data)))
    [trace] = [trace for episode in episodes for trace in episode.traces]
    assert trace.ok and trace.stop_condition == "episode_over", trace.errors
    session_id = trace.info["gym"]["session_id"]
    stored = gym.stored(session_id, "completed")  # acme's read key finds it ...
    assert trace.rewards["gym"].score == stored["reward"] == 1.0 and stored["run"] == "vf-keys"
    assert stored["num_turns"] == trace.metrics["gym_steps"] > 1  # the tool server's steps carried it too
    assert gym.get(f"/v1/rollouts/{session_id}", key=keyed_gym.rival)[0] == 404  # ... rival's does not
    assert key not in caplog.text and files_holding(Path(data["output_dir"]), key) == []
    assert key.split("_", 2)[2] not in repr(trace.state)  # the secret: url-safe base64, may hold "_"


def test_vf_eval_takes_the_key_from_gym_api_key(keyed_gym: KeyedGym, tmp_path: Path) -> None:
    gym, key = keyed_gym.gym, keyed_gym.episodes
    with serve_scripted_policy() as url:
        # fmt: off
        args = [
            "gym-server-verifiers", "--env.taskset.env", "counter", "--env.taskset.task-ids", "counter-0004",
            "--env.taskset.task.base-url", gym.url, "--env.taskset.task.run", "vf-keys-cli",
            "--env.agent.runtime.type", "subprocess",
            "--model", "scripted", "--client.base-url", url, "--client.api-key-var", "GYM_INTEROP_POLICY_KEY",
            "--no-push", "--no-rich", "-o", str(tmp_path), "--run.name", "cli",
        ]
        # fmt: on
        vf_eval = Path(sys.executable).parent / "vf-eval"
        env = {**os.environ, "GYM_API_KEY": key}
        done = subprocess.run([vf_eval, *args], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = (tmp_path / "cli" / "traces.jsonl").read_text().splitlines()
    [trace] = json.loads(line)["traces"]
    stored = gym.stored(trace["info"]["gym"]["session_id"], "completed")
    assert trace["rewards"]["gym"]["score"] == stored["reward"] == 1.0 and stored["run"] == "vf-keys-cli"
    assert key not in done.stdout + done.stderr and files_holding(tmp_path, key) == []


@pytest.mark.parametrize("which", ["none", "wrong"])
def test_without_a_valid_key_loading_fails_with_the_gyms_401(
    keyed_gym: KeyedGym, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    monkeypatch.delenv("GYM_API_KEY", raising=False)
    key = keyed_gym.wrong if which == "wrong" else None
    env = gym_server_verifiers.load_environment(keyed_gym.gym.url, "counter", api_key=key)
    with pytest.raises(GymError, match=r"gym answered 401 to GET .*: a valid API key is required") as raised:
        list(env.taskset)
    assert raised.value.status == 401 and keyed_gym.wrong not in str(raised.value)


def test_a_key_in_the_config_is_dumped_masked(keyed_gym: KeyedGym) -> None:
    config = vf.resolve_env_config(
        {"taskset": {"id": "gym-server-verifiers", "env": "counter", "task": {"api_key": keyed_gym.episodes}}}
    )
    assert keyed_gym.episodes not in config.model_dump_json() and "**********" in config.model_dump_json()
