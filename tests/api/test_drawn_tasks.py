"""A session from just an environment (issue 10 defect 5): `POST /v1/sessions` with only `env` (and
optionally `seed`, `split`) draws a task from the seed, the way gymnasium's `reset(seed=...)` does; the
same env, split and seed give the same task and start state in any process, and the response and the
stored trajectory say which task and seed were used."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from conftest import AppHarness
from gymtest import assert_problem, wait_for_rollout

from gym_env_counter.env import CounterEnv


async def draw(gym: AppHarness, **body: object) -> dict[str, object]:
    response = await gym.client.post("/v1/sessions", json={"env": "counter", **body})
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_the_same_seed_and_split_give_the_same_task_and_start(gym: AppHarness) -> None:
    first = await draw(gym, seed=11, split="validation")
    again = await draw(gym, seed=11, split="validation")
    assert first["task_id"] == again["task_id"] and first["seed"] == again["seed"] == 11
    assert first["messages"] == again["messages"]
    validation = {task.id for task in CounterEnv.dataset().tasks("validation")}
    drawn = {(await draw(gym, seed=seed, split="validation"))["task_id"] for seed in range(30)}
    assert drawn <= validation
    assert len(drawn) > 1  # the seed picks the task; it is not always the first one


async def test_the_default_split_is_train(gym: AppHarness) -> None:
    train = {task.id for task in CounterEnv.dataset().tasks("train")}
    assert {(await draw(gym, seed=seed))["task_id"] for seed in range(10)} <= train


async def test_the_draw_is_the_same_in_another_process(gym: AppHarness) -> None:
    seeds = [0, 1, 2**40, 2**63 - 1]
    here = [(await draw(gym, seed=seed, split="train"))["task_id"] for seed in seeds]
    script = (
        "import json, sys\n"
        "from gym_server.sdk.registry import Registry\n"
        "entry = Registry.discover().get('counter')\n"
        "print(json.dumps([entry.draw('train', s).id for s in json.loads(sys.argv[1])]))\n"
    )
    there = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script, json.dumps(seeds)],
        capture_output=True,
        check=True,
        text=True,
    )
    assert json.loads(there.stdout) == here


async def test_without_a_seed_one_is_chosen_reported_and_stored(gym: AppHarness) -> None:
    created = await draw(gym)
    seed = created["seed"]
    assert isinstance(seed, int) and 0 <= seed < 2**63
    replay = await draw(gym, seed=seed)
    assert replay["task_id"] == created["task_id"] and replay["messages"] == created["messages"]
    await gym.client.delete(f"/v1/sessions/{created['session_id']}")
    stored = await wait_for_rollout(gym.client, str(created["session_id"]), "abandoned")
    assert stored["task_id"] == created["task_id"] and stored["seed"] == seed


async def test_an_unknown_or_empty_split_is_404_naming_the_splits(gym: AppHarness) -> None:
    problem = assert_problem(
        await gym.client.post("/v1/sessions", json={"env": "counter", "seed": 1, "split": "tset"}),
        404,
        "'tset'",
    )
    assert "train (" in problem["detail"] and "validation (" in problem["detail"]
    assert problem["type"].endswith("split-not-found")
    assert gym.app.state.manager.live_count == 0


async def test_a_dataset_without_train_draws_from_its_split(gym: AppHarness) -> None:
    created = await gym.client.post("/v1/sessions", json={"env": "humaneval", "seed": 5})
    assert created.status_code == 201, created.text
    assert str(created.json()["task_id"]).startswith("humaneval-")
