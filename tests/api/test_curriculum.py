"""The curriculum against a store of known totals: the weights each rule gives counter's validation tasks,
sessions drawn by `task_choice` (deterministic with a seed, only from the tasks the rule keeps), and the
fallback to uniform sampling that says so, for a policy without history or a frontier that holds nothing.

History stored (policy `tiny`, run `r1`, counter validation `counter-0050..0059`), scored episodes and
successes per task: 0050 4/0 (rate 0), 0051 4/4 (rate 1), 0052 4/2 (0.5), 0053 4/1 (0.25); the other six
unseen. Policy `tiny` in run `r2`: 0054 2/2. Policy `solver`: every validation task 1/1.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import AppHarness
from gymtest import assert_problem
from sqlalchemy.orm import Session

from gym_server.sessions.curriculum import TaskChoice, draw_task, weigh_tasks
from gym_server.store.inspector import TaskPasses
from gym_server.store.migrate import make_engine
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import upsert_trajectories

VALIDATION = [f"counter-{n:04d}" for n in range(50, 60)]
HISTORY = {"counter-0050": (4, 0), "counter-0051": (4, 4), "counter-0052": (4, 2), "counter-0053": (4, 1)}
UNSEEN = VALIDATION[4:]
FRONTIER = ["counter-0052", "counter-0053", *UNSEEN[1:]]  # every run of `tiny`: 0054 is solved in r2


def _episodes(model: str, run: str, history: dict[str, tuple[int, int]]) -> list[TrajectoryRecord]:
    records: list[TrajectoryRecord] = []
    for task_id, (scored, successes) in history.items():
        for n in range(scored):
            records.append(
                TrajectoryRecord(
                    id=f"{model}-{run}-{task_id}-{n}",
                    run=run,
                    env="counter",
                    env_version="v1",
                    task_id=task_id,
                    status=TrajectoryStatus.COMPLETED,
                    reward=1.0 if n < successes else 0.0,
                    policy={"model": model},
                    created_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=len(records)),
                )
            )
    return records


@pytest.fixture
async def gym(app_factory: Any, database_url: str) -> Any:
    async with app_factory() as harness:
        records = _episodes("tiny", "r1", HISTORY) + _episodes("tiny", "r2", {"counter-0054": (2, 2)})
        records += _episodes("solver", "r1", dict.fromkeys(VALIDATION, (1, 1)))
        engine = make_engine(database_url)
        with Session(engine) as session, session.begin():
            upsert_trajectories(session, records)
        engine.dispose()
        yield harness


async def curriculum(gym: AppHarness, **params: Any) -> dict[str, Any]:
    response = await gym.client.get(
        "/v1/environments/counter/curriculum", params={"split": "validation", **params}
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def weights(answer: dict[str, Any]) -> dict[str, float]:
    return {task["task_id"]: task["weight"] for task in answer["tasks"]}


async def test_frontier_keeps_the_band_and_the_unseen(gym: AppHarness) -> None:
    answer = await curriculum(gym, rule="frontier", policy="tiny", run="r1", min_pass=0.1, max_pass=0.9)
    assert (answer["rule"], answer["fallback"]) == ("frontier", None)
    assert weights(answer) == dict.fromkeys(["counter-0052", "counter-0053", *UNSEEN], 1.0)
    rates = {task["task_id"]: (task["scored"], task["pass_rate"]) for task in answer["tasks"]}
    assert rates["counter-0052"] == (4, 0.5) and rates["counter-0053"] == (4, 0.25)
    # the policy's whole history: 0054 was solved in r2 (rate 1), so it leaves the frontier
    assert set(weights(await curriculum(gym, rule="frontier", policy="tiny"))) == set(FRONTIER)


async def test_difficulty_weighs_by_one_minus_the_pass_rate(gym: AppHarness) -> None:
    answer = await curriculum(gym, rule="difficulty", policy="tiny", run="r1", floor=0.05)
    expected = {"counter-0050": 1.0, "counter-0051": 0.05, "counter-0052": 0.5, "counter-0053": 0.75}
    assert weights(answer) == expected | dict.fromkeys(UNSEEN, 1.0)


async def test_no_history_falls_back_to_uniform_and_says_so(gym: AppHarness) -> None:
    answer = await curriculum(gym, rule="frontier", policy="never-trained")
    assert (answer["requested"], answer["rule"]) == ("frontier", "uniform")
    assert (
        "'never-trained' has no scored episode" in answer["fallback"]
        and "uniform sampling" in answer["fallback"]
    )
    assert weights(answer) == dict.fromkeys(VALIDATION, 1.0)

    solved = await curriculum(gym, rule="frontier", policy="solver", min_pass=0.1, max_pass=0.9)
    assert (
        solved["rule"] == "uniform"
        and "no task of counter/validation has a pass rate in [0.1, 0.9]" in solved["fallback"]
    )


async def test_sessions_draw_from_the_frontier_deterministically(gym: AppHarness) -> None:
    choice = {"rule": "frontier", "min_pass": 0.1, "max_pass": 0.9}
    body = {"env": "counter", "split": "validation", "policy": {"model": "tiny"}, "task_choice": choice}
    drawn = []
    for seed in range(24):
        response = await gym.client.post("/v1/sessions", json={**body, "seed": seed})
        assert response.status_code == 201, response.text
        created = response.json()
        assert created["seed"] == seed
        report = created["task_choice"]
        assert (report["task_id"], report["rule"], report["fallback"], report["candidates"]) == (
            created["task_id"],
            "frontier",
            None,
            len(FRONTIER),
        )
        drawn.append(created["task_id"])
    assert set(drawn) <= set(FRONTIER) and len(set(drawn)) > 2
    again = await gym.client.post("/v1/sessions", json={**body, "seed": 5})
    assert again.json()["task_id"] == drawn[5]


async def test_a_session_for_a_policy_without_history_says_it_sampled_uniformly(gym: AppHarness) -> None:
    body = {"env": "counter", "split": "validation", "seed": 3, "task_choice": {"policy": "nobody"}}
    response = await gym.client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    report = response.json()["task_choice"]
    assert report["rule"] == "uniform" and report["requested"] == "frontier"
    assert "'nobody' has no scored episode" in report["fallback"]
    assert report["candidates"] == 10 and response.json()["task_id"] in VALIDATION


async def test_bad_task_choices_are_refused(gym: AppHarness) -> None:
    no_policy = await gym.client.post(
        "/v1/sessions", json={"env": "counter", "task_choice": {"rule": "frontier"}}
    )
    assert_problem(no_policy, 422, "give task_choice.policy or policy.model")
    with_task = {"env": "counter", "task_id": "counter-0000", "task_choice": {"policy": "tiny"}}
    assert_problem(await gym.client.post("/v1/sessions", json=with_task), 422, "task_choice draws the task")
    band = {"env": "counter", "task_choice": {"policy": "tiny", "min_pass": 0.9, "max_pass": 0.1}}
    assert_problem(
        await gym.client.post("/v1/sessions", json=band), 422, "min_pass 0.9 is above max_pass 0.1"
    )
    unknown = await gym.client.get(
        "/v1/environments/counter/curriculum", params={"rule": "frontier", "bogus": 1}
    )
    assert unknown.status_code == 422
    split = await gym.client.get("/v1/environments/counter/curriculum", params={"split": "nope"})
    assert_problem(split, 404, "no split 'nope'")


def test_the_draw_follows_the_weights_and_the_seed() -> None:
    passes = {
        "a": TaskPasses(task_id="a", scored=10, successes=9),
        "b": TaskPasses(task_id="b", scored=10, successes=1),
    }
    plan = weigh_tasks("env", "train", ["a", "b"], passes, TaskChoice(rule="difficulty", floor=0.05), "p")
    assert [(task.task_id, round(task.weight, 6)) for task in plan.tasks] == [("a", 0.1), ("b", 0.9)]
    draws = [draw_task(plan, seed).task_id for seed in range(2000)]
    assert draws == [draw_task(plan, seed).task_id for seed in range(2000)]
    assert 0.85 < draws.count("b") / len(draws) < 0.95  # 2000 draws: 0.9 +- 0.02 at 3 sigma
