"""The episode gateway's routes (docs/gateway.md): the OpenAI-compatible base URL of an episode, the
final answer of an agent that used its own tools, and the token-exact samples of a stored episode.

The OpenAI routes answer errors in OpenAI's shape (`{"error": {"message", "type", "code"}}`), which the
agents' OpenAI clients parse, and read their body themselves: a chat request is passed on as the agent
wrote it (fields the gym does not know included), so it is not a pydantic model here.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from functools import partial
from typing import Any, cast

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.api.deps import ManagerDep, StoreDep, TenantDep
from gym_server.api.schemas import EpisodeAnswered, GatewayAnswer
from gym_server.core.asgi import read_body
from gym_server.core.errors import GymError, RolloutNotFound
from gym_server.core.problems import StrictJsonRoute, gym_error_problem
from gym_server.gateway.errors import GatewayError
from gym_server.gateway.record import SOURCE
from gym_server.gateway.samples import SamplesReport, samples_report
from gym_server.gateway.service import Gateways
from gym_server.sessions.live import LiveSession
from gym_server.sessions.manager import SessionManager

router = APIRouter(tags=["gateway"], route_class=StrictJsonRoute)

_OPENAI = "/v1/sessions/{session_id}/openai/v1"
_OPENAI_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "not a chat request the gateway records (OpenAI's error shape)"},
    404: {"description": "unknown episode, or one opened without a gateway"},
    410: {"description": "the episode was closed or expired"},
    502: {"description": "the upstream failed or gave no token ids: the episode is stored as policy_error"},
    504: {"description": "the upstream was too slow: the episode is stored as policy_timeout"},
}


def _gateways(request: Request) -> Gateways:
    return cast(Gateways, request.app.state.gateways)


def _error(exc: GatewayError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


_OPENAI_PATH = re.compile(r"/v1/sessions/[^/]+/openai/v1/")


def body_refusal(scope: Scope, exc: GymError) -> ASGIApp:
    """The front's refusals of a body (`BodyGuard`: 413, 415) in OpenAI's error shape on the OpenAI
    routes, whose clients parse that and not problem+json; problem+json on every other route."""
    if _OPENAI_PATH.search(scope["path"]):
        return _error(GatewayError.from_gym(exc))
    return gym_error_problem(exc)


@router.post(
    f"{_OPENAI}/chat/completions", summary="OpenAI chat completions, recorded", responses=_OPENAI_ERRORS
)
async def chat_completions(session_id: str, request: Request) -> Response:
    """Forwarded to the episode's upstream asking for token ids and logprobs; the complete call is
    recorded on the episode. After the episode ended: an assistant message saying so, not recorded."""
    return await _chat(_gateways(request), session_id, await request.body())


async def _chat(gateways: Gateways, session_id: str, raw: bytes) -> Response:
    """The answer to one chat call, from its raw body: the route's and `GatewayFastPath`'s."""
    try:
        try:
            body: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise GatewayError.bad_request("the body is not JSON") from None
        if not isinstance(body, dict):
            raise GatewayError.bad_request("the body must be a JSON object (a chat completion request)")
        if body.get("stream") is True:
            events = await gateways.chat_stream(session_id, body)
            return _EventStream(events, media_type="text/event-stream")
        return Response(await gateways.chat(session_id, body), media_type="application/json")
    except GatewayError as exc:
        return _error(exc)


class _EventStream(StreamingResponse):
    """A streamed chat answer, sent by the task that reads it from the upstream.

    Starlette's `StreamingResponse` (under uvicorn's ASGI 2.3) runs the sending in a task group beside a
    task that waits for the client's disconnect, and cancels the group when either ends: most of the
    gym's CPU per streamed call beyond a whole answer's. Here one plain task waits for the disconnect
    (the body was read already, so the next message can only be that), and the sender looks at it after
    each event: a client gone ends the stream there, the upstream's answer is closed and nothing is
    recorded, as before; only a client leaving while the upstream is silent is noticed at its next event
    (at most the read timeout) instead of at once.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        events = self.body_iterator
        assert isinstance(events, AsyncGenerator)
        gone = asyncio.ensure_future(receive())
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            async for chunk in events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if gone.done():
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()
            await events.aclose()


class GatewayFastPath:
    """A stage of the gym's front (`core.asgi.Stage`) serving `POST {base_url}/chat/completions` without
    FastAPI's routing and layers.

    A call through the gateway costs the gym two HTTP exchanges, and FastAPI's layers (its middleware
    stack, the match against every route, the endpoint's dependency solving) were about half of the
    gym's CPU per call once the upstream client was cheap (docs/benchmarks.md#episode-gateway). Here the
    path is split and the route's own function answers: the same checks, errors and answers. The front's
    checks before it (host guard, auth, media type, body limit) have run already; a request with a root
    path, another method or path goes on to FastAPI untouched.
    """

    _PREFIX, _SUFFIX = "/v1/sessions/", "/openai/v1/chat/completions"

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        """The app answering a chat call through a session's gateway; None for any other request."""
        path: str = scope["path"] if scope["type"] == "http" else ""
        session_id = path[len(self._PREFIX) : -len(self._SUFFIX)]
        if (
            not path.endswith(self._SUFFIX)
            or not path.startswith(self._PREFIX)
            or scope["method"] != "POST"
            or scope.get("root_path")
            or not session_id
            or "/" in session_id
        ):
            return None
        return partial(_chat_fast, session_id=session_id)


async def _chat_fast(scope: Scope, receive: Receive, send: Send, *, session_id: str) -> None:
    try:
        raw = await read_body(receive)
    except ClientDisconnect:
        return  # the client left before the end of its body: nobody to answer
    response = await _chat(scope["app"].state.gateways, session_id, raw)
    await response(scope, receive, send)


@router.get(f"{_OPENAI}/models", summary="The upstream's models", responses=_OPENAI_ERRORS)
async def list_models(session_id: str, request: Request) -> Response:
    try:
        return JSONResponse(await _gateways(request).models(session_id))
    except GatewayError as exc:
        return _error(exc)


@router.post(
    "/v1/sessions/{session_id}/answer",
    response_model=EpisodeAnswered,
    summary="End the episode on the agent's final answer, score and store it",
    responses={404: {"description": "unknown session"}, 410: {"description": "closed or expired"}},
)
async def answer_episode(
    session_id: str, manager: ManagerDep, body: GatewayAnswer | None = None
) -> EpisodeAnswered:
    """For an agent with its own tools: the environment's verifier scores the final answer (given, or
    the last recorded assistant message's content) and the episode is closed and stored."""
    text = body.answer if body is not None else None
    if text is None:
        session = manager.get(session_id)
        text = _last_answer(session.turn_data)
    result = await manager.answer(session_id, text)
    return EpisodeAnswered(**result.model_dump())


def _last_answer(turns: list[dict[str, Any]]) -> str:
    for turn in reversed(_gateway_calls(turns)):
        response = turn.get("response")
        if isinstance(response, dict):
            return str(response.get("content") or "")
    return ""


@router.get(
    "/v1/rollouts/{rollout_id}/samples",
    response_model=SamplesReport,
    summary="The episode's token-exact training samples",
    responses={404: {"description": "unknown rollout"}},
)
async def rollout_samples(
    rollout_id: str, store: StoreDep, manager: ManagerDep, tenant: TenantDep
) -> Response:
    """The recorded gateway calls split into samples with action masks (docs/gateway.md)."""
    # A live episode's calls are read from the episode itself, not from its stored row: the row is a
    # snapshot taken every few seconds, and a trainer asking right after a call (a stream's record is
    # made as the stream ends) found the call missing (issue 37).
    live = _live(manager, rollout_id, tenant)
    if live is not None:
        turns = list(live.turn_data)  # a copy: calls may be recorded while the thread splits these
        reward = live.verified.reward if live.verified is not None else None
    else:
        record = await store.get(rollout_id, tenant=tenant)
        if record is None:
            raise RolloutNotFound(rollout_id)
        turns, reward = record.turns, record.reward
    # In a thread: an episode's token ids run to megabytes; splitting and serializing them is CPU work.
    body = await asyncio.to_thread(_samples_json, turns, reward)
    return Response(body, media_type="application/json")


def _live(manager: SessionManager, session_id: str, tenant: str | None) -> LiveSession | None:
    """The live episode `session_id` of `tenant` (any tenant's when None), else None."""
    try:
        session = manager.get(session_id)
    except GymError:
        return None
    return session if tenant is None or session.tenant == tenant else None


class _StoredCall(BaseModel):
    """The fields of a gateway's call record (`gateway.record.call_record`) the samples are made of, as
    the gateway writes them. A `turns` entry marked as the gateway's that is not of this shape was not
    written by it (a client's turn data, before the server refused the mark in it: issue 37), so it is
    no call of the episode: never a sample, never a 500."""

    model_config = ConfigDict(strict=True)

    call: int = Field(ge=0)
    prompt_ids: list[int] | None
    completion_ids: list[int] | None
    logprobs: list[float] | None


def _gateway_calls(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gateway's call records among `turns`, in call order."""
    calls: list[dict[str, Any]] = []
    for turn in turns:
        if turn.get("source") != SOURCE:
            continue
        try:
            _StoredCall.model_validate(turn)
        except ValidationError:
            continue
        calls.append(turn)
    return sorted(calls, key=lambda turn: int(turn["call"]))


def _samples_json(turns: list[dict[str, Any]], reward: float | None) -> bytes:
    return samples_report(_gateway_calls(turns), reward).model_dump_json().encode()
