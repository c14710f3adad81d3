"""Stored trajectories: every finished, expired, failed or lost episode, filterable by run, env and task,
and re-scored on demand with the environment's current verifier.

Stored trajectories are serialized in a worker thread: a transcript may hold 8 MiB, a page 500 of them."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from gym_server.api.deps import RegistryDep, SettingsDep, StoreDep, TenantDep
from gym_server.api.schemas import RolloutPage
from gym_server.core.errors import RolloutNotFound
from gym_server.core.problems import StrictJsonRoute
from gym_server.scoring.rescoring import Rescorer
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import TrajectoryFilter

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"], route_class=StrictJsonRoute)


@router.get("", response_model=RolloutPage, summary="List stored trajectories, newest first")
async def list_rollouts(
    store: StoreDep,
    tenant: TenantDep,
    run: Annotated[str | None, Query(max_length=256)] = None,
    env: Annotated[str | None, Query(max_length=128)] = None,
    task_id: Annotated[str | None, Query(max_length=256)] = None,
    status: TrajectoryStatus | None = None,
    parent_id: Annotated[
        str | None, Query(max_length=128, description="only the forks of this episode (docs/fork.md)")
    ] = None,
    min_version: Annotated[int | None, Query(ge=0, description="every call at or after this version")] = None,
    max_version: Annotated[
        int | None, Query(ge=0, description="every call at or before this version")
    ] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> Response:
    where = TrajectoryFilter(
        run=run,
        env=env,
        task_id=task_id,
        status=status,
        tenant=tenant,
        parent_id=parent_id,
        min_version=min_version,
        max_version=max_version,
    )
    items, total = await store.page(where, offset=offset, limit=limit)
    head = f'{{"offset":{offset},"limit":{limit},"total":{total},"items":['.encode()
    return Response(await asyncio.to_thread(_json_list, head, items, b"]}"), media_type="application/json")


@router.get(
    "/{rollout_id}",
    response_model=TrajectoryRecord,
    summary="One stored trajectory",
    responses={404: {"description": "unknown rollout"}},
)
async def get_rollout(rollout_id: str, store: StoreDep, tenant: TenantDep) -> Response:
    record = await store.get(rollout_id, tenant=tenant)
    if record is None:
        raise RolloutNotFound(rollout_id)
    return Response(await asyncio.to_thread(record.model_dump_json), media_type="application/json")


def _json_list(head: bytes, records: list[TrajectoryRecord], tail: bytes) -> bytes:
    """`head`, the records as a JSON array's items, `tail`: in a worker thread, one record at a time, so
    the GIL changes hands between records (a page may hold 500 transcripts of up to 8 MiB each)."""
    return head + b",".join(record.model_dump_json().encode() for record in records) + tail


class ScoreVersion(BaseModel):
    """A score and the verifier version that gave it."""

    reward: float | None
    verifier_version: str | None


class ReverifyResponse(BaseModel):
    """The stored score a re-verification replaced, and the new one (now the rollout's current score)."""

    rollout_id: str
    env: str
    task_id: str
    previous: ScoreVersion
    current: ScoreVersion
    components: dict[str, float] = Field(default_factory=dict)
    failure: str | None = Field(None, description="set when the new verdict must not be trained on")
    info: dict[str, Any] = Field(default_factory=dict)
    changed: bool
    delta: float | None = Field(None, description="new minus previous reward; null without a previous one")
    env_version: str
    rescored_at: datetime


@router.post(
    "/{rollout_id}/reverify",
    response_model=ReverifyResponse,
    summary="Re-score a stored trajectory with the current verifier, keeping the old score beside it",
    responses={
        404: {"description": "unknown rollout"},
        409: {"description": "still live, or its environment or task is no longer installed"},
        503: {"description": "trajectory database down"},
    },
)
async def reverify_rollout(
    rollout_id: str, store: StoreDep, registry: RegistryDep, settings: SettingsDep, tenant: TenantDep
) -> ReverifyResponse:
    if tenant is not None and await store.get(rollout_id, tenant=tenant) is None:
        raise RolloutNotFound(rollout_id)  # another tenant's: as unknown as an id never used
    outcome = await Rescorer(registry, store, settings.limits).rescore(rollout_id)
    return ReverifyResponse(
        rollout_id=outcome.rollout_id,
        env=outcome.env,
        task_id=outcome.task_id,
        previous=ScoreVersion(
            reward=outcome.previous_reward, verifier_version=outcome.previous_verifier_version
        ),
        current=ScoreVersion(reward=outcome.reward, verifier_version=outcome.verifier_version),
        components=outcome.components,
        failure=outcome.failure,
        info=outcome.info,
        changed=outcome.changed,
        delta=outcome.delta,
        env_version=outcome.env_version,
        rescored_at=outcome.rescored_at,
    )
