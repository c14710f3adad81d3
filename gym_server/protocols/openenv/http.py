"""OpenEnv's HTTP routes (`POST /reset`, `POST /step`, `GET /state`) on the gym's sessions.

OpenEnv's own HTTP routes are stateless (each request builds a fresh environment and drops it), which
cannot hold a multi-turn episode; here they keep OpenEnv's request and response shapes and carry the
episode in the one field OpenEnv's requests already allow: `POST /reset` opens a gym episode and
answers its id in `observation.metadata["gym-server/episode"].session_id`; `POST /step` names it as
`episode_id` beside the `action` (OpenEnv's `StepRequest` allows extra fields); `GET /state` takes it
as `?episode_id=`. The step that ends the episode also closes it, committed before the answer; an
episode left unfinished ends on the gym's idle TTL, stored `expired`. Errors are the gym's problem+json
at the native statuses (422 with pydantic's `errors` list, as FastAPI and so OpenEnv's server send it).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from gym_server.core import jsontext
from gym_server.core.errors import SessionNotFound
from gym_server.core.problems import StrictJsonRoute, parse_body
from gym_server.protocols.openenv import mapping
from gym_server.protocols.openenv.episodes import act, open_episode
from gym_server.sessions.manager import SessionManager

__all__ = ["OPENENV_HTTP_PREFIX", "StepBody", "reset_answer", "router", "step_answer"]

OPENENV_HTTP_PREFIX = "/v1/environments/{env:path}/openenv"  # a family member's name holds a slash

router = APIRouter(prefix=OPENENV_HTTP_PREFIX, tags=["openenv"], route_class=StrictJsonRoute)


class StepBody(BaseModel):
    """OpenEnv's `StepRequest` with the episode named: `action` as its WebSocket step's `data`."""

    model_config = ConfigDict(extra="forbid")

    action: mapping.Action
    episode_id: str = Field(max_length=64)
    timeout_s: float | None = Field(None, gt=0)
    request_id: str | None = Field(None, max_length=255)


_JSON = "application/json"


def _json(payload: dict[str, Any]) -> Response:
    return Response(jsontext.dumps(payload, default=str), media_type=_JSON)


def _manager(request: Request) -> SessionManager:
    manager: SessionManager = request.app.state.manager
    return manager


def _invalid(exc: mapping.ActionError) -> RequestValidationError:
    """A tool call the native step refuses, as FastAPI's 422: pydantic's errors in the body's `action`."""
    errors = [{**error, "loc": ["body", "action", *error["loc"]]} for error in exc.errors]
    return RequestValidationError(
        errors or [{"type": "value_error", "loc": ["body", "action"], "msg": exc.message}]
    )


@router.post("/reset", summary="OpenEnv reset: open an episode (body: seed, episode_id, task_id, split, run)")
async def reset(env: str, request: Request) -> Response:
    """The documented form of the route; `OpenEnvFastPath` serves the requests it accepts as is."""
    return Response(await reset_answer(_manager(request), env, await request.body()), media_type=_JSON)


@router.post("/step", summary="OpenEnv step: one action on the episode named by episode_id")
async def step(env: str, request: Request) -> Response:
    """The documented form of the route; `OpenEnvFastPath` serves the requests it accepts as is."""
    return Response(await step_answer(_manager(request), env, await request.body()), media_type=_JSON)


async def reset_answer(manager: SessionManager, env: str, raw: bytes) -> bytes:
    """OpenEnv's reset answer, as JSON: a new gym episode (OpenEnv's body is optional).

    Raises:
        RequestValidationError: a body that is not OpenEnv's reset request (422).
        GymError: as the native session create (404, 429, 503, ...).
    """
    params = parse_body(raw, mapping.ResetParams) if raw else mapping.ResetParams()
    session = await open_episode(manager, env, params, "http")
    try:
        return jsontext.dumps(mapping.reset_result(session, "http"), default=str)
    except BaseException:  # the client never learns the episode's id: nothing may stay open
        await manager.close(session.id)
        raise


async def step_answer(manager: SessionManager, env: str, raw: bytes) -> bytes:
    """OpenEnv's step answer, as JSON; the step that ends the episode closes it first.

    Raises:
        RequestValidationError: a body that is not a `StepBody`, or a tool call the native step refuses
            (422, nothing stored).
        GymError: as the native step (404, 409, 410, ...).
    """
    body = parse_body(raw, StepBody)
    _check_env(manager, body.episode_id, env)
    try:
        answer = await act(manager, body.episode_id, body.action)
    except mapping.ActionError as exc:
        raise _invalid(exc) from None
    if answer["done"]:
        await manager.close(body.episode_id)  # finished: stored now, not at the TTL
    return jsontext.dumps(answer, default=str)


@router.get("/state", summary="OpenEnv state of the episode named by episode_id (none: a fresh state)")
async def state(
    env: str, request: Request, episode_id: Annotated[str | None, Query(max_length=64)] = None
) -> Response:
    manager = _manager(request)
    if episode_id is None:  # OpenEnv's own GET /state answers a fresh environment's state
        return _json(mapping.fresh_state(manager.registry.get(env)))
    _check_env(manager, episode_id, env)
    return _json(mapping.state(manager.get(episode_id)))


def _check_env(manager: SessionManager, session_id: str, env: str) -> None:
    """An episode is reached only through its own environment's routes (404 otherwise, as unknown)."""
    if manager.get(session_id).entry.name != env:
        raise SessionNotFound(session_id)
