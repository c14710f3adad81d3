"""Stored trajectories: every finished, expired, failed or lost episode, filterable by run, env and task."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gym_server.api.deps import StoreDep
from gym_server.api.schemas import RolloutPage
from gym_server.errors import RolloutNotFound
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"])


@router.get("", response_model=RolloutPage, summary="List stored trajectories, newest first")
async def list_rollouts(
    store: StoreDep,
    run: Annotated[str | None, Query(max_length=256)] = None,
    env: Annotated[str | None, Query(max_length=128)] = None,
    task_id: Annotated[str | None, Query(max_length=256)] = None,
    status: TrajectoryStatus | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> RolloutPage:
    items = await store.list(run=run, env=env, task_id=task_id, status=status, offset=offset, limit=limit)
    total = await store.count(run=run, env=env, task_id=task_id, status=status)
    return RolloutPage(offset=offset, limit=limit, total=total, items=items)


@router.get(
    "/{rollout_id}",
    response_model=TrajectoryRecord,
    summary="One stored trajectory",
    responses={404: {"description": "unknown rollout"}},
)
async def get_rollout(rollout_id: str, store: StoreDep) -> TrajectoryRecord:
    record = await store.get(rollout_id)
    if record is None:
        raise RolloutNotFound(rollout_id)
    return record
