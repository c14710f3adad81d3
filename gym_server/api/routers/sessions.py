"""Stateful episodes: create, step, verify, inspect and close a session, and record a turn the client
cut at its token budget.

An episode is create, steps, verify and close, so those four are the hot path. `SessionFastPath`, an
ASGI middleware, serves them straight from the ASGI messages (no routing, no dependency solving,
pre-serialized JSON out) by calling the same functions as the FastAPI routes below, which stay the
documented (OpenAPI) form of the API and take every request the fast path does not accept as is.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.api.deps import ManagerDep, RegistryDep, StoreDep, TenantDep
from gym_server.api.schemas import (
    CreateSessionRequest,
    ForkCreated,
    ForkRequest,
    SessionCreated,
    SessionState,
    StepRequest,
    StepResponse,
    TruncatedTurnRecorded,
    TruncatedTurnRequest,
)
from gym_server.auth.context import current_tenant
from gym_server.core import jsontext
from gym_server.core.asgi import has_json_content_type, read_body, replay_body
from gym_server.core.errors import GymError, InvalidRequest
from gym_server.core.problems import StrictJsonRoute, on_gym_error, parse_body
from gym_server.gateway.service import Gateways
from gym_server.sdk.environment import VerifyResult
from gym_server.sdk.registry import Registry
from gym_server.sessions.curriculum import CurriculumDraw, TaskChoice, choose_by_pass_rate, curriculum_for
from gym_server.sessions.fork import source_from_live, source_from_record
from gym_server.sessions.live import LiveSession
from gym_server.sessions.manager import SessionManager
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.writer import TrajectoryStore

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], route_class=StrictJsonRoute)

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


def _json(payload: dict[str, Any]) -> bytes:
    return jsontext.dumps(payload, default=str)


def _response(body: bytes, status_code: int = 200) -> Response:
    return Response(body, status_code=status_code, media_type="application/json")


async def _create(
    manager: SessionManager,
    body: CreateSessionRequest,
    chosen: CurriculumDraw | None = None,
    gateways: Gateways | None = None,
    base_url: str = "",
) -> bytes:
    """Open the episode; with `body.gateway`, `gateways` checks its upstream first (422 before anything is
    created) and opens its gateway, whose URLs start with `base_url` (the request's own). `chosen` says how
    a curriculum drew the task, when one did."""
    metadata = body.metadata
    spec = body.gateway
    upstream = None
    if spec is not None:
        if gateways is None:
            raise GymError("the gateways are not running")
        upstream = gateways.check(spec.upstream)
        metadata = {**metadata, "gateway": gateways.describe(upstream, spec.model, spec.token_exact)}
    session = await manager.create(
        body.env,
        task_id=body.task_id,
        task=body.task,
        seed=body.seed,
        split=body.split,
        ttl_s=body.ttl_s,
        run=body.run,
        policy=body.policy,
        metadata=metadata,
    )
    payload = _created(session)
    if chosen is not None:
        payload["task_choice"] = chosen.model_dump()
    if spec is not None and gateways is not None and upstream is not None:
        gateways.open(session, upstream, spec.model, spec.token_exact, spec.api_key)
        payload["gateway"] = _gateway_links(base_url, session.id)
    return _json(payload)


def _created(session: LiveSession) -> dict[str, Any]:
    """A new session as its create (or fork) answers it (`SessionCreated`)."""
    payload: dict[str, Any] = {
        "session_id": session.id,
        "env": session.entry.name,
        "env_version": session.entry.version,
        "task_id": session.env.task.id,
        "seed": session.env.seed,
        "messages": session.env.messages,
        "tools": session.tools,
        "max_turns": session.max_turns,
        "expires_at": session.expires_at().isoformat(),
    }
    if session.parent_id is not None:
        payload["parent_id"], payload["parent_turn"] = session.parent_id, session.parent_turn
    return payload


def _gateway_links(base_url: str, session_id: str) -> dict[str, str]:
    episode = f"{base_url.rstrip('/')}{router.prefix}/{session_id}"
    return {"base_url": f"{episode}/openai/v1", "mcp_url": f"{episode}/mcp"}


async def _by_curriculum(
    store: TrajectoryStore, registry: Registry, body: CreateSessionRequest, choice: TaskChoice
) -> tuple[CreateSessionRequest, CurriculumDraw]:
    """The request with the task `choice` draws from the store's pass rates (in a worker thread)."""
    policy = choice.policy or (body.policy or {}).get("model")
    if choice.rule != "uniform" and not isinstance(policy, str):
        raise InvalidRequest(
            f"task_choice rule {choice.rule!r} reads a policy's pass rates: "
            "give task_choice.policy or policy.model"
        )
    seed = body.seed if body.seed is not None else secrets.randbelow(2**63)
    entry = registry.get(body.env)
    tenant = current_tenant.get()
    chosen = await store.read(
        lambda session: choose_by_pass_rate(
            curriculum_for(session, entry, body.split, choice, policy, tenant), seed
        )
    )
    update = {"task_id": chosen.task_id, "seed": seed, "split": None, "task_choice": None}
    return body.model_copy(update=update), chosen


async def _step(manager: SessionManager, session_id: str, body: StepRequest) -> bytes:
    result = await manager.step(session_id, body.message.to_dict(), body.turn_data)
    return _json(
        {"messages": result.messages, "done": result.done, "reward": result.reward, "info": result.info}
    )


async def _verify(manager: SessionManager, session_id: str) -> bytes:
    return (await manager.verify(session_id)).model_dump_json().encode()


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SessionCreated,
    summary="Start an episode",
    responses={404: {"description": "unknown env or task"}, 429: {"description": "at capacity"}},
)
async def create_session(
    body: CreateSessionRequest, manager: ManagerDep, store: StoreDep, registry: RegistryDep, request: Request
) -> Response:
    gateways: Gateways | None = getattr(request.app.state, "gateways", None)
    chosen = None
    if body.task_choice is not None:
        body, chosen = await _by_curriculum(store, registry, body, body.task_choice)
    created = await _create(manager, body, chosen, gateways, str(request.base_url))
    return _response(created, status.HTTP_201_CREATED)


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
    """One assistant message in; the environment's replies out, with the reward when the episode ends."""
    # Reads its body itself (one validation straight from the bytes, as the fast path does), hence
    # the request schema declared by hand above.
    manager: SessionManager = request.app.state.manager
    body = parse_body(await request.body(), StepRequest)
    return _response(await _step(manager, request.path_params["session_id"], body))


@router.post(
    "/{session_id}/verify", response_model=VerifyResult, summary="Score the episode so far", responses=_ERRORS
)
async def verify_session(session_id: str, manager: ManagerDep) -> Response:
    return _response(await _verify(manager, session_id))


@router.post(
    "/{session_id}/truncated-turn",
    response_model=TruncatedTurnRecorded,
    summary="Record a turn cut at the client's token budget",
    responses={**_ERRORS, 409: {"description": "the episode is finished, or already has a truncated turn"}},
)
async def record_truncated_turn(
    session_id: str, body: TruncatedTurnRequest, manager: ManagerDep
) -> TruncatedTurnRecorded:
    """Append a turn the policy did not finish (cut at `max_tokens` or the episode's token budget) to
    the trajectory's `turns`, marked `truncated: true`, so the stored record holds every token the
    trainer saw. The environment is not stepped and its verifier never sees the text: the episode is
    scored on the state its finished turns left. No step may follow (409); verify and close as usual.
    The text counts towards the transcript budget like a step's message."""
    turns, failure = await manager.record_truncated_turn(session_id, body.content, body.turn_data)
    return TruncatedTurnRecorded(turns=turns, failure=failure)


@router.post(
    "/{session_id}/fork",
    status_code=status.HTTP_201_CREATED,
    response_model=ForkCreated,
    summary="Fork the episode at a turn",
    responses={
        404: {"description": "unknown session (another tenant's answers the same)"},
        409: {"description": "the replay diverged, the environment does not fork, or its version is gone"},
        422: {"description": "turn beyond the episode or one that ended it, n above the limit"},
        429: {"description": "at capacity (all n forks must fit)"},
    },
)
async def fork_session(
    session_id: str,
    body: ForkRequest,
    manager: ManagerDep,
    store: StoreDep,
    registry: RegistryDep,
    tenant: TenantDep,
    request: Request,
) -> Response:
    """Open `n` live sessions in the state this episode (live or stored) had after `turn`, each holding
    its messages up to there and ready for the next assistant turn; all of them or none (docs/fork.md)."""
    live: LiveSession | None
    try:
        live = manager.get(session_id)
    except GymError as exc:
        if exc.status not in (404, 410):
            raise
        record = await store.get(session_id, tenant=tenant)
        if record is None:
            raise
        live, source = None, await asyncio.to_thread(source_from_record, record, registry)
    else:
        source = await source_from_live(live)
    gateways: Gateways | None = getattr(request.app.state, "gateways", None)
    metadata, spec, upstream = body.metadata, body.gateway, None
    if spec is not None:
        if gateways is None:
            raise GymError("the gateways are not running")
        upstream = gateways.check(spec.upstream)
        metadata = {**metadata, "gateway": gateways.describe(upstream, spec.model, spec.token_exact)}
    forks = await manager.fork(
        source, body.turn, body.n, live=live, ttl_s=body.ttl_s, run=body.run, metadata=metadata
    )
    created = []
    for fork in forks:
        payload = _created(fork)
        opened = None
        if gateways is not None and upstream is not None and spec is not None:
            opened = gateways.open(fork, upstream, spec.model, spec.token_exact, spec.api_key)
        elif gateways is not None and live is not None:
            opened = gateways.inherit(live, fork)
        if opened is not None:
            payload["gateway"] = _gateway_links(str(request.base_url), fork.id)
        created.append(payload)
    answer = {"parent_id": source.id, "turn": body.turn, "fork_mode": source.entry.cls.fork_mode.value}
    # n copies of the episode's messages (up to 16 of an episode of the largest turns: ~100 MiB of JSON)
    # are rendered in a thread, not on the loop (tests/test_event_loop_guard.py's worst case).
    rendered = await asyncio.to_thread(_json, {**answer, "forks": created})
    return _response(rendered, status.HTTP_201_CREATED)


@router.get("/{session_id}", response_model=SessionState, summary="Transcript and state", responses=_ERRORS)
async def get_session(
    session_id: str, manager: ManagerDep, store: StoreDep, tenant: TenantDep
) -> SessionState:
    try:
        return _live_state(manager.get(session_id))
    except GymError as exc:
        if exc.status not in (404, 410):
            raise
        stored = await store.get(session_id, tenant=tenant)
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


def _plain_create_body(scope: Scope, raw: bytes) -> CreateSessionRequest | None:
    """The create body if it is plain JSON that validates; else None, and FastAPI's route answers."""
    if not has_json_content_type(scope):
        return None
    try:
        body = CreateSessionRequest.model_validate_json(raw)
        jsontext.refuse_unstorable(raw)
    except (ValidationError, ValueError):
        return None
    return body if body.task_choice is None else None  # a curriculum draw reads the store: the route's work


class SessionFastPath:
    """A stage of the gym's front (`core.asgi.Stage`) serving the episode's routes (create, step, verify,
    close) without FastAPI.

    FastAPI's routing, dependency solving and middleware cost more than the session work itself; here
    each route is a path split and a call of the function its FastAPI route calls. Whatever this does
    not take as is (a root path, a create body that is not plain `application/json` or fails
    validation, a step body that fails validation, a close with a query string, another method or
    path) goes on to FastAPI with its body replayed, so errors come out exactly as the routes make
    them. Manager errors become the same problem+json as the app's handler makes; anything else
    propagates to the app's catch-all, as from a route.
    """

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        """The app serving an episode's create, step, verify or close; None for any other request."""
        path: str = scope["path"] if scope["type"] == "http" else ""
        if not path.startswith(router.prefix) or scope.get("root_path"):
            return None
        method, tail = scope["method"], path[len(router.prefix) :]
        session_id, slash, action = tail[1:].partition("/")
        if tail == "" and method == "POST":
            return partial(_serve, "create", "", rest)
        if not tail.startswith("/") or not session_id or "/" in action:
            return None
        if (action == "step" or action == "verify") and method == "POST":
            return partial(_serve, action, session_id, rest)
        if not slash and method == "DELETE" and not scope["query_string"]:
            return partial(_serve, "close", session_id, rest)
        return None


async def _serve(
    action: str, session_id: str, rest: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> None:
    """Answer the episode `action` `SessionFastPath` took (or hand a body it cannot take to `rest`)."""
    manager: SessionManager = scope["app"].state.manager
    work: Awaitable[bytes | None]
    if action == "create" or action == "step":
        try:
            raw = await read_body(receive)
        except ClientDisconnect:
            return  # the client left before the end of its body: nobody to answer, nothing to log
        if action == "create":
            create = _plain_create_body(scope, raw)
            if create is None or create.gateway is not None:  # a gateway's URLs need the request's base URL
                await rest(scope, replay_body(raw, receive), send)
                return
            work, status_code = _create(manager, create), status.HTTP_201_CREATED
        else:
            try:
                step = parse_body(raw, StepRequest)
            except RequestValidationError:
                await rest(scope, replay_body(raw, receive), send)
                return
            work, status_code = _step(manager, session_id, step), status.HTTP_200_OK
    elif action == "verify":
        work, status_code = _verify(manager, session_id), status.HTTP_200_OK
    else:
        work, status_code = manager.close(session_id), status.HTTP_204_NO_CONTENT
    try:
        body = await work
    except GymError as exc:
        await (await on_gym_error(Request(scope), exc))(scope, receive, send)
        return
    if body is None:  # as Starlette answers a 204: no content headers
        await send({"type": "http.response.start", "status": status_code, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
        parent_id=session.parent_id,
        parent_turn=session.parent_turn,
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
        parent_id=record.parent_id,
        parent_turn=record.parent_turn,
    )
