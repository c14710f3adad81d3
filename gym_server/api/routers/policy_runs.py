"""Policy runs and the rollout buffer: a trainer announces its versions and pulls complete, scored groups
no more than `max_staleness` versions old; producers ask before playing each group, and are told to wait
(429) when the buffer is as far ahead of the trainer as the bound allows. docs/rollout-buffer.md.

Every answer is sent after its change is committed (`PolicyRuns`), so a kill -9 of the server loses
nothing a client was told."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gym_server.api.deps import PolicyRunsDep, TenantDep
from gym_server.core.problems import StrictJsonRoute
from gym_server.store.buffer import Acknowledgement, Announcement, Handout, RunState
from gym_server.store.records import BUFFER_GROUP_KEY, NAME_MAX_CHARS, NAME_PATTERN

router = APIRouter(prefix="/v1/policy-runs", tags=["rollout buffer"], route_class=StrictJsonRoute)

RunName = Annotated[str, Path(min_length=1, max_length=NAME_MAX_CHARS, pattern=NAME_PATTERN)]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "the run was never announced"}}


class GroupRequest(BaseModel):
    """`POST /v1/policy-runs/{run}/groups`: a producer asks to play one group."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=1, le=1024, description="episodes in the group (GRPO's num_generations)")
    env: str | None = Field(None, max_length=NAME_MAX_CHARS, pattern=NAME_PATTERN)
    task_id: str | None = Field(None, max_length=NAME_MAX_CHARS, pattern=NAME_PATTERN)
    wait_s: float = Field(0.0, ge=0, le=60, description="while the buffer is full, wait up to this for room")


class GroupAdmitted(BaseModel):
    """A group the producer may play: give each of its sessions `metadata` (and the run as `run`)."""

    group_id: str
    run: str
    version: int = Field(description="the run's version now: sample with it")
    metadata: dict[str, str] = Field(description="what each episode's session must carry in its metadata")


class PullRequest(BaseModel):
    """`POST /v1/policy-runs/{run}/pull`: lease the next complete, scored groups."""

    model_config = ConfigDict(extra="forbid")

    max_groups: int = Field(1, ge=1, le=1024)
    min_groups: int = Field(1, ge=1, le=1024, description="lease none until this many are ready")
    lease_s: float = Field(
        300.0, gt=0, le=86_400, description="acknowledge within this, else handed out again"
    )
    wait_s: float = Field(0.0, ge=0, le=60, description="wait up to this for min_groups ready groups")

    @model_validator(mode="after")
    def _bounds(self) -> PullRequest:
        if self.min_groups > self.max_groups:
            raise ValueError("min_groups must not exceed max_groups")
        return self


class AckRequest(BaseModel):
    """`POST /v1/policy-runs/{run}/acks`: the trainer used the groups of a lease."""

    model_config = ConfigDict(extra="forbid")

    lease_id: str = Field(min_length=1, max_length=32, pattern=r"^[0-9a-f]+$")


@router.post(
    "/{run}/versions",
    response_model=RunState,
    summary="Announce the policy version now sampled (creates the run at its first announcement)",
    responses={409: {"description": "the version is lower than the run's"}},
)
async def announce(run: RunName, body: Announcement, runs: PolicyRunsDep, tenant: TenantDep) -> RunState:
    return await runs.announce(tenant, run, body)


@router.get("/{run}", response_model=RunState, summary="A policy run and its groups", responses=_NOT_FOUND)
async def get_run(run: RunName, runs: PolicyRunsDep, tenant: TenantDep) -> RunState:
    return await runs.state(tenant, run)


@router.post(
    "/{run}/groups",
    status_code=201,
    response_model=GroupAdmitted,
    summary="Ask to play one more group (429 with Retry-After while the buffer is at its bound)",
    responses={**_NOT_FOUND, 429: {"description": "the buffer is as far ahead as max_staleness allows"}},
)
async def admit_group(
    run: RunName, body: GroupRequest, runs: PolicyRunsDep, tenant: TenantDep
) -> GroupAdmitted:
    group_id, version = await runs.admit(
        tenant, run, size=body.size, env=body.env, task_id=body.task_id, wait_s=body.wait_s
    )
    return GroupAdmitted(group_id=group_id, run=run, version=version, metadata={BUFFER_GROUP_KEY: group_id})


@router.post(
    "/{run}/pull",
    response_model=Handout,
    summary="Lease the next complete, scored groups within the staleness bound",
    responses=_NOT_FOUND,
)
async def pull(run: RunName, body: PullRequest, runs: PolicyRunsDep, tenant: TenantDep) -> Response:
    handout = await runs.pull(
        tenant,
        run,
        max_groups=body.max_groups,
        min_groups=body.min_groups,
        lease_s=body.lease_s,
        wait_s=body.wait_s,
    )
    # serialized in a worker thread: a batch holds whole transcripts
    return Response(await asyncio.to_thread(handout.model_dump_json), media_type="application/json")


@router.post(
    "/{run}/acks",
    response_model=Acknowledgement,
    summary="Consume the groups of a lease (idempotent)",
    responses={
        404: {"description": "unknown run or lease"},
        409: {"description": "the lease expired and holds none of its groups"},
    },
)
async def acknowledge(
    run: RunName, body: AckRequest, runs: PolicyRunsDep, tenant: TenantDep
) -> Acknowledgement:
    return await runs.acknowledge(tenant, run, body.lease_id)
