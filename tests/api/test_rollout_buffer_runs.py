"""Server-driven runs as producers of the rollout buffer (`POST /v1/rollouts` with `buffer: true`): each
task's group is played only once its policy run admits it, so the run follows the trainer's steps."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from conftest import AppHarness
from gymtest import apoll, assert_problem

# A policy that refuses connections: every episode ends at once as `policy_error` (finished, unscored),
# which is all a group needs to be complete.
DEAD_POLICY = {"base_url": "http://127.0.0.1:9", "model": "gone", "api": "chat", "timeout_s": 2}


def run_body(run: str, **extra: Any) -> dict[str, Any]:
    return {
        "env": "counter",
        "task_ids": ["counter-0000", "counter-0001", "counter-0002"],
        "n": 2,
        "run": run,
        "buffer": True,
        "policy": DEAD_POLICY,
        **extra,
    }


async def board(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    return dict((await client.get(f"/v1/rollouts/runs/{run_id}")).json())


async def test_a_buffered_run_plays_a_group_per_admission(gym: AppHarness) -> None:
    client = gym.client
    run = f"buffered-{uuid.uuid4().hex[:8]}"
    announced = await client.post(
        f"/v1/policy-runs/{run}/versions", json={"version": 0, "max_staleness": 0, "groups_per_step": 1}
    )
    assert announced.status_code == 200
    started = await client.post("/v1/rollouts", json=run_body(run))
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    for version in range(3):  # one group per trainer step: the run waits for each announcement
        handout = (await client.post(f"/v1/policy-runs/{run}/pull", json={"wait_s": 30})).json()
        [group] = handout["groups"]
        assert len(group["episodes"]) == 2 and {e["failure"] for e in group["episodes"]} == {"policy_error"}
        assert len({e["task_id"] for e in group["episodes"]}) == 1
        await asyncio.sleep(0.3)  # time for the run to (wrongly) play ahead
        assert (await board(client, run_id))["finished"] == 2 * (version + 1)
        acked = await client.post(f"/v1/policy-runs/{run}/acks", json={"lease_id": handout["lease_id"]})
        assert acked.status_code == 200
        await client.post(f"/v1/policy-runs/{run}/versions", json={"version": version + 1})
    finished = await apoll(lambda: board(client, run_id), lambda view: view["status"] != "running")
    assert finished["status"] == "completed" and finished["finished"] == 6


async def test_a_buffered_run_needs_an_announced_run(gym: AppHarness) -> None:
    client = gym.client
    assert_problem(await client.post("/v1/rollouts", json=run_body("never-announced")), 404, "announce")
    body = run_body("x")
    del body["run"]
    assert_problem(await client.post("/v1/rollouts", json=body), 422, "")
