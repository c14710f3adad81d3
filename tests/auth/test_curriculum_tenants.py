"""A curriculum reads the pass rates of the caller's tenant only: another tenant's history of a policy of
the same name is none of its business, so to it the policy has no history (uniform, and said so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from authtest import KeyMaker, bearer
from sqlalchemy.orm import Session

from gym_server.store.migrate import make_engine
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import upsert_trajectories


def _solved(tenant: str, task_id: str, n: int) -> TrajectoryRecord:
    return TrajectoryRecord(
        id=f"{tenant}-{task_id}-{n}",
        env="counter",
        env_version="v1",
        task_id=task_id,
        status=TrajectoryStatus.COMPLETED,
        reward=1.0,
        policy={"model": "shared-name"},
        tenant=tenant,
    )


async def test_a_tenant_sees_only_its_own_pass_rates(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str], database_url: str
) -> None:
    owner, other = tenant(), tenant()
    owner_key, other_key = keys.create(owner, "episodes"), keys.create(other, "episodes")
    engine = make_engine(database_url)
    with Session(engine) as session, session.begin():
        upsert_trajectories(session, [_solved(owner, "counter-0050", n) for n in range(3)])
    engine.dispose()
    params = {"split": "validation", "rule": "frontier", "policy": "shared-name"}
    async with secured() as gym:
        path = "/v1/environments/counter/curriculum"
        mine = (await gym.client.get(path, params=params, headers=bearer(owner_key))).json()
        theirs = (await gym.client.get(path, params=params, headers=bearer(other_key))).json()
        body = {"env": "counter", "split": "validation", "seed": 0, "task_choice": {"policy": "shared-name"}}
        created = await gym.client.post("/v1/sessions", json=body, headers=bearer(other_key))
    assert mine["rule"] == "frontier" and "counter-0050" not in {task["task_id"] for task in mine["tasks"]}
    assert theirs["rule"] == "uniform" and "'shared-name' has no scored episode" in theirs["fallback"]
    assert created.status_code == 201, created.text
    assert created.json()["task_choice"]["rule"] == "uniform"
