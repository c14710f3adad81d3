"""`load_curriculum_dataset` against a served gym whose store holds known totals: rows come only from the
frontier, the mixture picks the environment, the same seed gives the same rows, and a policy without
history is drawn uniformly with the reason logged."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import ServerProcess
from sqlalchemy.orm import Session

from gym_server.store.migrate import make_engine, upgrade_database
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import upsert_trajectories

pytestmark = pytest.mark.slow  # a served gym process

# policy `tiny` on counter's validation split: 0050 never solved, 0051 always, 0052 half the time
HISTORY = {"counter-0050": (0, 2), "counter-0051": (2, 2), "counter-0052": (1, 2)}
VALIDATION = {f"counter-{n:04d}" for n in range(50, 60)}


def _store_history(url: str) -> None:
    upgrade_database(url)
    records = [
        TrajectoryRecord(
            id=f"{task_id}-{n}",
            run="r1",
            env="counter",
            env_version="v1",
            task_id=task_id,
            status=TrajectoryStatus.COMPLETED,
            reward=1.0 if n < successes else 0.0,
            policy={"model": "tiny"},
            created_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n),
        )
        for task_id, (successes, scored) in HISTORY.items()
        for n in range(scored)
    ]
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        upsert_trajectories(session, records)
    engine.dispose()


def test_a_dataset_drawn_from_the_frontier_and_mixed(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("datasets")
    from gym_trainer.trl import load_curriculum_dataset

    url = f"sqlite:///{tmp_path / 'gym.db'}"
    _store_history(url)
    server = server_factory(url, GYM_LOG_LEVEL="warning")
    server.start(timeout_s=120)  # a busy 2-core machine starts it slowly
    choice = {"rule": "frontier", "policy": "tiny", "min_pass": 0.1, "max_pass": 0.9}

    rows = load_curriculum_dataset(
        server.url, ["counter"], 60, task_choice=choice, split="validation", seed=1
    )
    drawn = set(rows["task_id"])
    assert drawn <= VALIDATION - {"counter-0050", "counter-0051"} and len(drawn) > 3
    assert set(rows["curriculum_rule"]) == {"frontier"}
    assert {row["prompt"][0]["gym_task_id"] for row in rows} == drawn
    assert (
        next(
            rate
            for task, rate in zip(rows["task_id"], rows["pass_rate"], strict=True)
            if task == "counter-0052"
        )
        == 0.5
    )
    again = load_curriculum_dataset(
        server.url, ["counter"], 60, task_choice=choice, split="validation", seed=1
    )
    assert again["task_id"] == rows["task_id"]

    caplog.set_level(logging.WARNING, logger="gym_trainer.trl.curriculum")
    mixed = load_curriculum_dataset(
        server.url,
        {"counter": 3.0, "math": 1.0},
        400,
        task_choice={"rule": "frontier", "policy": "nobody"},
        split=None,
        seed=2,
    )
    shares = Counter(mixed["env"])
    assert 0.68 < shares["counter"] / 400 < 0.82  # 0.75 +- 3 sigma (0.065)
    assert set(mixed["curriculum_rule"]) == {"uniform"}
    assert "'nobody' has no scored episode" in caplog.text and "uniform sampling" in caplog.text
