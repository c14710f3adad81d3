"""Experiment tracking: a demo-like loop logs the gym's metrics to each backend, and the test reads them
back from the backend's own local store (trackio's SQLite database, the W&B offline run file, the MLflow
file store through `MlflowClient`).

The loop plays real episodes against an in-process gym with a scripted tiny-tokenizer policy, so every
metric is known: step 1 has a solved episode and one with a malformed tool call, step 2 an episode
whose policy fails (the "no signal" failure class `policy_error`).
"""

from __future__ import annotations

import math
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, Rollout, RolloutDriver
from gym_trainer.toolcalls import render_tool_call
from gym_trainer.tracking import BACKENDS, open_tracker, rollout_metrics


def counter_start(task_id: str, seed: int) -> int:
    import random

    return random.Random(f"{task_id}\x00{seed}").randint(0, 20)


async def _play(gym: GymClient, tokenizer: Any, renderer: ChatRenderer, scripted: Any) -> list[list[Rollout]]:
    start = counter_start("counter-0000", 3)
    solve = [
        render_tool_call("add", {"amount": 10}),
        render_tool_call("add", {"amount": 26 - start - 10}),
        render_tool_call("submit", {}),
    ]
    config = DriverConfig(run="tracking", max_turns=4)

    async def episode(script: list[str], task: str, seed: int) -> Rollout:
        driver = RolloutDriver(gym, scripted(tokenizer, script), renderer, config)
        return await driver.run_episode(EpisodeSpec("counter", task, seed=seed))

    step1 = [
        await episode(solve, "counter-0000", 3),
        await episode(['<tool_call>{"name": "add", oops</tool_call>'], "counter-0001", 0),
    ]
    step2 = [await episode([render_tool_call("read", {})], "counter-0002", 0)]  # then the script runs out
    return [step1, step2]


def _read_trackio(project: str, run: str, directory: Path) -> dict[int, dict[str, float]]:
    from trackio.sqlite_storage import SQLiteStorage

    assert SQLiteStorage.get_project_db_path(project).parent == directory
    return {int(log["step"]): log for log in SQLiteStorage.get_logs(project, run)}


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B transaction log (`run-*.wandb`): LevelDB's log format after a 7-byte
    `:W&B` header, in 32 KiB blocks of chunks (crc32 u32, length u16, type u8: full/first/middle/last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    block, position, pending, records = 32 * 1024, 7, b"", []
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # the block's tail is padding
            position += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        pending += chunk
        if kind in (1, 4):  # full, last
            records.append(pending)
            pending = b""
    return records


def _read_wandb(directory: Path, steps_logged: int) -> dict[int, dict[str, float]]:
    """The run's history; `run.finish()` returns before wandb's service has flushed the log to disk,
    so the file is read again until every logged step is in it (or a deadline passes)."""
    deadline = time.monotonic() + 60
    while True:
        steps = _wandb_history(directory)
        if len(steps) >= steps_logged or time.monotonic() > deadline:
            return steps
        time.sleep(0.1)


def _wandb_history(directory: Path) -> dict[int, dict[str, float]]:
    import json

    from wandb.proto import wandb_internal_pb2

    (path,) = directory.glob("wandb/offline-run-*/run-*.wandb")
    steps: dict[int, dict[str, float]] = {}
    for raw in _wandb_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            steps[int(items.pop("_step"))] = items
    return steps


def _read_mlflow(project: str, run: str, directory: Path) -> dict[int, dict[str, float]]:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=(directory / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name(project)
    assert experiment is not None
    (found,) = client.search_runs([experiment.experiment_id], filter_string=f"tags.mlflow.runName = '{run}'")
    assert found.info.status == "FINISHED"
    steps: dict[int, dict[str, float]] = {}
    for key in found.data.metrics:
        for metric in client.get_metric_history(found.info.run_id, key):
            steps.setdefault(metric.step, {})[key] = metric.value
    return steps


@pytest.fixture(scope="module")
def trackio_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trackio fixes its folder when first imported: this module's, unless another test imported it."""
    if "trackio" not in sys.modules:
        os.environ["TRACKIO_DIR"] = str(tmp_path_factory.mktemp("trackio"))
    pytest.importorskip("trackio")
    from trackio.utils import TRACKIO_DIR

    return Path(TRACKIO_DIR)


@pytest.mark.parametrize("backend", ["trackio", "wandb", "mlflow"])
async def test_each_backend_stores_the_gym_metrics(
    backend: str,
    gym_client: GymClient,
    tiny_tokenizer: Any,
    renderer: ChatRenderer,
    scripted: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    pytest.importorskip(backend)
    steps = await _play(gym_client, tiny_tokenizer, renderer, scripted)
    expected = {step: rollout_metrics(rollouts) for step, rollouts in enumerate(steps, start=1)}
    # What the steps are: known rewards, an invalid call, a failure class with no signal.
    assert expected[1]["gym/reward_mean"] == 0.5 and expected[1]["gym/success_rate"] == 0.5
    assert expected[1]["gym/reward_std"] == 0.5
    assert expected[1]["gym/invalid_tool_call_rate"] == pytest.approx(1 / 4)  # 1 bad of 3 + 1 turns
    assert expected[2]["gym/failures/policy_error"] == 1.0 and "gym/reward_mean" not in expected[2]
    assert expected[1]["gym/env_latency_ms_per_step"] > 0 and expected[1]["gym/episode_turns_mean"] == 2

    project, run = f"gym-tracking-{backend}", f"run-{tmp_path.name}"
    directory = request.getfixturevalue("trackio_dir") if backend == "trackio" else tmp_path / backend
    tracker = open_tracker(
        backend,
        project=project,
        run=run,
        config={"lr": 1e-3, "output": tmp_path},
        directory=None if backend == "trackio" else directory,
    )
    assert tracker.backend == backend
    for step, metrics in expected.items():
        tracker.log(metrics, step)
    tracker.finish()

    if backend == "trackio":
        stored = _read_trackio(project, run, directory)
    elif backend == "wandb":
        stored = _read_wandb(directory, len(expected))
    else:
        stored = _read_mlflow(project, run, directory)
    for step, metrics in expected.items():
        for key, value in metrics.items():
            assert math.isclose(stored[step][key], value, rel_tol=1e-6), (backend, step, key)


def test_none_and_unknown_backends() -> None:
    tracker = open_tracker("none")
    tracker.log({"gym/reward_mean": 1.0}, 1)
    tracker.finish()
    assert set(BACKENDS) == {"trackio", "wandb", "mlflow", "none"}
    with pytest.raises(ValueError, match="unknown tracker 'tensorboard'"):
        open_tracker("tensorboard")


def test_metrics_of_no_episodes_leave_out_what_is_undefined() -> None:
    assert rollout_metrics([]) == {"gym/episodes": 0.0}
