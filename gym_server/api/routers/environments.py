"""The catalog: environments, their versions and tools, and their tasks without answers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gym_server.api.deps import RegistryDep
from gym_server.api.schemas import DatasetInfo, EnvironmentInfo, EnvironmentList, TaskPage
from gym_server.sdk.registry import EnvironmentEntry

router = APIRouter(prefix="/v1/environments", tags=["environments"])


def describe(entry: EnvironmentEntry) -> EnvironmentInfo:
    cls = entry.cls
    return EnvironmentInfo(
        name=entry.name,
        version=entry.version,
        verifier_version=entry.verifier_version,
        description=cls.description,
        kind="multi-turn" if cls.multi_turn else "single-turn",
        max_turns=cls.max_turns,
        tools=cls.catalog_tools(),
        datasets=[DatasetInfo(name=entry.dataset.name, splits=entry.dataset.split_sizes())],
    )


@router.get("", response_model=EnvironmentList, summary="List environments")
async def list_environments(registry: RegistryDep) -> EnvironmentList:
    return EnvironmentList(environments=[describe(entry) for entry in registry])


# Registered before the bare `{env:path}` route: family names such as `reasoning_gym/leg_counting` hold a '/'.
@router.get("/{env:path}/tasks", response_model=TaskPage, summary="List an environment's tasks (no answers)")
async def list_tasks(
    env: str,
    registry: RegistryDep,
    split: Annotated[str | None, Query(max_length=64)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TaskPage:
    tasks = registry.get(env).dataset.tasks(split)
    page = [task.public() for task in tasks[offset : offset + limit]]
    return TaskPage(env=env, split=split, offset=offset, limit=limit, total=len(tasks), tasks=page)


@router.get("/{env:path}", response_model=EnvironmentInfo, summary="Describe one environment")
async def get_environment(env: str, registry: RegistryDep) -> EnvironmentInfo:
    return describe(registry.get(env))
