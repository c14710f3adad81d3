"""Stateful episodes: create, step, verify, inspect and close a session.

The step route is the hot path: it validates only the incoming message, takes no database dependency,
and answers with pre-serialized JSON.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Request, Response, status
from starlette.routing import Route

from gym_server.api.deps import ManagerDep, StoreDep
from gym_server.api.errors import parse_body
from gym_server.api.schemas import (
    CreateSessionRequest,
    SessionCreated,
    SessionState,
    StepRequest,
    StepResponse,
)
from gym_server.errors import GymError
from gym_server.sdk.environment import VerifyResult
from gym_server.sessions.manager import LiveSession, SessionManager
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "unknown session"},
    409: {"description": "the episode is finished"},
    410: {"description": "the session expired or was closed"},
    413: {"description": "request body over the limit"},
    422: {"description": "malformed message"},
}


# The step route reads its body itself (see step_session), so its schema is declared here; the
# message models it refers to are in the components through the verify routes.
_STEP_REQUEST_SCHEMA = {
    key: value
    for key, value in StepRequest.model_json_schema(ref_template="#/components/schemas/{model}").items()
    if key != "$defs"
}


def _json(payload: dict[str, Any], status_code: int = 200) -> Response:
    return Response(
        orjson.dumps(payload, default=str), status_code=status_code, media_type="application/json"
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SessionCreated,
    summary="Start an episode",
    responses={404: {"description": "unknown env or task"}, 429: {"description": "at capacity"}},
)
async def create_session(body: CreateSessionRequest, manager: ManagerDep) -> Response:
    session = await manager.create(
        body.env,
        task_id=body.task_id,
        task=body.task,
        seed=body.seed,
        ttl_s=body.ttl_s,
        run=body.run,
        policy=body.policy,
        metadata=body.metadata,
    )
    return _json(
        {
            "session_id": session.id,
            "env": session.entry.name,
            "env_version": session.entry.version,
            "task_id": session.env.task.id,
            "seed": session.env.seed,
            "messages": session.env.messages,
            "tools": session.tools,
            "max_turns": session.max_turns,
            "expires_at": session.expires_at().isoformat(),
        },
        status.HTTP_201_CREATED,
    )


@router.post(
    "/{session_id}/step",
    response_model=StepResponse,
    summary="Send the assistant's message",
    responses=_ERRORS,
    openapi_extra={
        "parameters": [{"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _STEP_REQUEST_SCHEMA}},
        },
    },
)
async def step_session(request: Request) -> Response:
    """The hot path. It is also mounted as a plain Starlette route ahead of FastAPI's (see `fast_routes`),
    so it takes only the request: no dependency solving, one pydantic validation straight from the
    bytes, pre-serialized JSON out. FastAPI's copy of the route only documents it in OpenAPI."""
    manager: SessionManager = request.app.state.manager
    body = parse_body(await request.body(), StepRequest)
    result = await manager.step(request.path_params["session_id"], body.message.to_dict(), body.turn_data)
    return _json(
        {"messages": result.messages, "done": result.done, "reward": result.reward, "info": result.info}
    )


def fast_routes() -> list[Route]:
    """Starlette routes to put in front of the FastAPI router for the hottest endpoints."""
    return [Route(f"{router.prefix}/{{session_id}}/step", step_session, methods=["POST"])]


@router.post(
    "/{session_id}/verify", response_model=VerifyResult, summary="Score the episode so far", responses=_ERRORS
)
async def verify_session(session_id: str, manager: ManagerDep) -> VerifyResult:
    return await manager.verify(session_id)


@router.get("/{session_id}", response_model=SessionState, summary="Transcript and state", responses=_ERRORS)
async def get_session(session_id: str, manager: ManagerDep, store: StoreDep) -> SessionState:
    try:
        return _live_state(manager.get(session_id))
    except GymError as exc:
        if exc.status not in (404, 410):
            raise
        stored = await store.get(session_id)
        if stored is None:
            raise
        return _stored_state(stored)


@router.delete(
    "/{session_id}", status_code=status.HTTP_204_NO_CONTENT, summary="Close (idempotent)", responses=_ERRORS
)
async def close_session(
    session_id: str,
    manager: ManagerDep,
    failure: Annotated[
        Literal["policy_error", "policy_timeout"] | None,
        Query(description="why the client gave up: the trajectory is stored as failed with this class"),
    ] = None,
) -> Response:
    await manager.close(session_id, failure=failure)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _live_state(session: LiveSession) -> SessionState:
    env, verified = session.env, session.verified
    return SessionState(
        session_id=session.id,
        env=session.entry.name,
        env_version=session.entry.version,
        task_id=env.task.id,
        seed=env.seed,
        status=TrajectoryStatus.LIVE.value,
        done=env.done,
        done_reason=env.done_reason,
        failure=session.failure,
        turns=env.turns,
        max_turns=session.max_turns,
        messages=env.messages,
        tools=session.tools,
        reward=verified.reward if verified else None,
        components=verified.components if verified else {},
        expires_at=session.expires_at(),
    )


def _stored_state(record: TrajectoryRecord) -> SessionState:
    return SessionState(
        session_id=record.id,
        env=record.env,
        env_version=record.env_version,
        task_id=record.task_id,
        seed=record.seed,
        status=str(record.status),
        done=True,
        done_reason=record.done_reason,
        failure=record.failure,
        turns=record.num_turns,
        max_turns=record.num_turns,
        messages=record.messages,
        tools=record.tools,
        reward=record.reward,
        components=record.components,
        expires_at=None,
    )
