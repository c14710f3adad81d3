"""Stateless scoring of a completion or a transcript against a task, singly or in batches."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from gym_server.api.deps import RegistryDep, SettingsDep
from gym_server.api.schemas import BatchVerifyItem, BatchVerifyRequest, BatchVerifyResponse, VerifyRequest
from gym_server.core.errors import GymError
from gym_server.core.problems import StrictJsonRoute, problem_body
from gym_server.core.settings import Settings
from gym_server.sdk.environment import VerifyResult
from gym_server.sdk.registry import Registry
from gym_server.sessions.replay import verify_transcript
from gym_server.sessions.task_choice import choose_task

router = APIRouter(prefix="/v1/verify", tags=["verify"], route_class=StrictJsonRoute)

# Bounded so one large batch cannot monopolise the verifier workers.
_BATCH_CONCURRENCY = 16


async def _score(request: VerifyRequest, registry: Registry, settings: Settings) -> VerifyResult:
    entry = registry.get(request.env)
    # In a thread, as a session's create does: a generated task is made now, CPU work off the loop.
    task, _ = await asyncio.to_thread(
        choose_task, entry, task_id=request.task_id, task=request.task, split=None, seed=request.seed
    )
    if request.completion is not None:
        turns: list[dict[str, Any]] = [{"role": "assistant", "content": request.completion}]
    else:
        turns = [m.to_dict() for m in request.messages or [] if m.role == "assistant"]
    return await verify_transcript(entry, task, request.seed, turns, settings.limits)


@router.post(
    "",
    response_model=VerifyResult,
    summary="Score one completion or transcript",
    responses={404: {"description": "unknown env or task"}, 422: {"description": "malformed request"}},
)
async def verify(body: VerifyRequest, registry: RegistryDep, settings: SettingsDep) -> VerifyResult:
    return await _score(body, registry, settings)


@router.post(
    "/batch", response_model=BatchVerifyResponse, summary="Score many; each item succeeds or fails alone"
)
async def verify_batch(
    body: BatchVerifyRequest, registry: RegistryDep, settings: SettingsDep
) -> BatchVerifyResponse:
    gate = asyncio.Semaphore(_BATCH_CONCURRENCY)

    async def one(item: VerifyRequest) -> BatchVerifyItem:
        async with gate:
            try:
                return BatchVerifyItem(result=await _score(item, registry, settings))
            except GymError as exc:
                return BatchVerifyItem(
                    error=problem_body(exc.status, exc.slug, exc.title, exc.detail, **exc.extra)
                )

    return BatchVerifyResponse(results=list(await asyncio.gather(*(one(item) for item in body.items))))
