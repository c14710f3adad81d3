"""The catalog: environments, their versions and tools, and their tasks without answers.

Every handler works in a thread: an environment's first use (version hashes, dataset files, a generator
family's imports) is blocking work. The server warms each environment before it listens
(`Registry.warm`), so the threads are quick; they keep the event loop free when something is not warm.
A page of tasks is one `Dataset.task_range` per split, so a generated dataset makes (or reads from its
cache) only that page.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from gym_server.api.deps import ManagerDep, RegistryDep, StoreDep
from gym_server.api.schemas import DatasetInfo, EnvironmentInfo, EnvironmentList, TaskPage
from gym_server.auth.context import current_tenant
from gym_server.sdk.registry import EnvironmentEntry, Registry
from gym_server.sdk.tasks import Dataset
from gym_server.sessions.curriculum import Curriculum, TaskChoice, curriculum_for

router = APIRouter(prefix="/v1/environments", tags=["environments"])


class CurriculumQuery(TaskChoice):
    """The curriculum route's query: a task choice and the split it weighs (unknown parameters: 422)."""

    split: str | None = Field(None, min_length=1, max_length=64, description="default train, else the first")


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


def _describe_all(registry: Registry) -> EnvironmentList:
    return EnvironmentList(environments=[describe(entry) for entry in registry])


def task_page(
    dataset: Dataset, split: str | None, offset: int, limit: int
) -> tuple[int, list[dict[str, Any]]]:
    """(tasks in `split`, or in every split in order when None; the public form of tasks offset..+limit)."""
    sizes = dataset.split_sizes()
    names = list(sizes) if split is None else [split]
    total = sum(sizes.get(name, 0) for name in names)
    page: list[dict[str, Any]] = []
    skip = offset
    for name in names:
        size = sizes.get(name, 0)
        start, stop = skip, min(size, skip + limit - len(page))
        if start < stop:
            page.extend(task.public() for task in dataset.task_range(name, start, stop))
        skip = max(0, skip - size)
        if len(page) >= limit:
            break
    return total, page


@router.get("", response_model=EnvironmentList, summary="List environments")
async def list_environments(registry: RegistryDep) -> EnvironmentList:
    return await asyncio.to_thread(_describe_all, registry)


# Registered before the bare `{env:path}` route: family names such as `reasoning_gym/leg_counting` hold a '/'.
@router.get("/{env:path}/tasks", response_model=TaskPage, summary="List an environment's tasks (no answers)")
async def list_tasks(
    env: str,
    registry: RegistryDep,
    split: Annotated[str | None, Query(max_length=64)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TaskPage:
    dataset = registry.get(env).dataset
    total, page = await asyncio.to_thread(task_page, dataset, split, offset, limit)
    return TaskPage(env=env, split=split, offset=offset, limit=limit, total=total, tasks=page)


@router.get(
    "/{env:path}/curriculum",
    response_model=Curriculum,
    summary="Weigh an environment's tasks by a policy's pass rates",
    responses={404: {"description": "unknown env or split"}, 503: {"description": "the store is down"}},
)
async def get_curriculum(
    env: str,
    registry: RegistryDep,
    store: StoreDep,
    query: Annotated[CurriculumQuery, Query()],
) -> Curriculum:
    """The tasks of a split that `rule` keeps for `policy`, with their weights and pass rates (the rule is
    docs/curriculum.md); with no history, every task at weight 1 and `fallback` saying why."""
    entry = registry.get(env)
    tenant = current_tenant.get()
    choice = TaskChoice.model_validate(query.model_dump(exclude={"split"}))
    return await store.read(
        lambda session: curriculum_for(session, entry, query.split, choice, choice.policy, tenant)
    )


@router.get("/{env:path}", response_model=EnvironmentInfo, summary="Describe one environment")
async def get_environment(env: str, manager: ManagerDep) -> EnvironmentInfo:
    # An environment installed after start-up is found here too, as a session's create finds it.
    return await asyncio.to_thread(describe, await manager.catalog.entry(env))
