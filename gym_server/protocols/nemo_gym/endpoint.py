"""The ASGI endpoint `/v1/environments/{env}/nemo-gym/{route}`: an environment as a NeMo Gym resources
server, driving the gym's `SessionManager` (the same one as `/v1/sessions`).

- `POST .../seed_session` opens a gym session (task by `task_id`, or drawn by `seed` from `split`, from
  the body NeMo Gym's agent forwards: the dataset row) and answers its opening in a JSON object; the
  `Set-Cookie` it sends carries the gym session id, and every later answer on the episode sets it again,
  because NeMo Gym's agents keep only the cookies of the last answer.
- `POST .../{tool}` is one native step whose assistant message holds one call of `tool` with the body
  as its arguments; the tool message's content is the answer (200), or, when the engine reports a failed
  call, NeMo Gym's error form at 422. Either way the step is stored and the episode goes on, as natively.
  An unknown tool is a 404 in the same form and no step.
- `POST .../aggregate_metrics` answers NeMo Gym's statistics of the verify answers posted (`metrics.py`),
  as its base resources server does; it needs no episode.
- `POST .../verify` feeds the agent's final answer to the episode if it is still open (the last item of
  `response.output`, an assistant message no tool route saw), scores it, closes the session (committed
  before the 200) and answers the request's fields plus `reward`: in NeMo Gym a rollout ends at verify.
Refusals (429 at capacity with `Retry-After`, 404 unknown environment, task or session, 409 finished,
410 expired or closed, 422 a malformed body) are `{"detail": ...}` at the native API's status.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from gym_server.core import jsontext
from gym_server.core.asgi import read_body, send_json
from gym_server.core.errors import GymError, SessionNotFound
from gym_server.protocols.mcp.mapping import tool_reply
from gym_server.protocols.nemo_gym import wire
from gym_server.protocols.nemo_gym.metrics import aggregate_metrics
from gym_server.sdk.messages import Message
from gym_server.sessions.live import LiveSession
from gym_server.sessions.manager import SessionManager

__all__ = ["NemoGymEndpoint"]

Headers = list[tuple[bytes, bytes]]


class _Answer(Exception):
    """An answer other than a `GymError`'s, raised from within a handler: its status and body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status, self.body = status, body


class NemoGymEndpoint:
    """Answers one request of a NeMo Gym path (`NemoGymRoutes` puts `env` and `route` in the scope's
    `path_params`); finds the running `SessionManager` on `app.state.manager`."""

    def __repr__(self) -> str:
        return "NemoGymEndpoint()"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager: SessionManager | None = getattr(scope["app"].state, "manager", None)
        if manager is None:  # the app's lifespan has not started (or has ended)
            await send_json(send, 503, wire.error_body("the gym is not running"), [])
            return
        if scope["method"] != "POST":
            await send_json(send, 405, wire.error_body("Method Not Allowed"), [(b"allow", b"POST")])
            return
        try:
            raw = await read_body(receive)
        except ClientDisconnect:
            return
        env: str = scope["path_params"]["env"]
        route: str = scope["path_params"]["route"]
        session: LiveSession | None = None
        headers: Headers
        try:
            if route == "seed_session":
                session, body = await _seed(manager, env, raw)
                status, headers = 200, []
            elif route == "aggregate_metrics":  # about finished rollouts, so no episode (no cookie)
                status, body, headers = await _aggregate(manager, env, raw)
            else:
                session = _session(manager, env, scope)
                if route == "verify":
                    status, body, headers = await _verify(manager, session, raw)
                else:
                    status, body, headers = await _tool(manager, session, route, raw)
        except _Answer as answer:
            status, body, headers = answer.status, answer.body, []
        except GymError as exc:
            headers = [(name.lower().encode(), value.encode()) for name, value in exc.headers.items()]
            status, body = exc.status, wire.error_body(exc.detail)
        if session is not None and manager.is_live(session.id):
            # Every answer on a live episode (errors too) sets the cookie again: NeMo Gym's agents send
            # the next call with the cookies of the last answer only.
            headers.append(wire.cookie_header(session.id, session.ttl_s))
        await send_json(send, status, body, headers)


def _session(manager: SessionManager, env: str, scope: Scope) -> LiveSession:
    """The live episode the request's cookie names, opened on this environment's endpoint.

    Raises:
        _Answer: no cookie (400).
        GymError: the session is unknown (404), closed or expired (410), or another environment's (404).
    """
    session_id = wire.session_from_cookie(scope["headers"])
    if session_id is None:
        raise _Answer(
            400,
            wire.error_body(
                f"no episode: POST /v1/environments/{env}/nemo-gym/seed_session first and send back the "
                f"{wire.COOKIE!r} cookie it sets"
            ),
        )
    session = manager.get(session_id)
    if session.entry.name != env:
        raise SessionNotFound(session_id)  # an episode of another environment is not this server's
    return session


async def _seed(manager: SessionManager, env: str, raw: bytes) -> tuple[LiveSession, bytes]:
    params = wire.parse_seed(wire.parse_object(raw))
    session = await manager.create(
        env,
        task_id=params.task_id,
        seed=params.seed,
        split=params.split,
        ttl_s=params.ttl_s,
        run=params.run,
        metadata={"protocol": "nemo-gym"},
    )
    try:
        body = {**session.identity(), "messages": session.env.messages, "tools": session.tools}
        return session, jsontext.dumps(body, default=str)
    except BaseException:  # the agent never gets the cookie: nothing may stay open
        await manager.close(session.id)
        raise


async def _aggregate(manager: SessionManager, env: str, raw: bytes) -> tuple[int, bytes, Headers]:
    """NeMo Gym's base resources server's `/aggregate_metrics` over the posted verify answers."""
    manager.registry.get(env)  # 404 for an unknown environment, as its other routes answer
    answers = wire.parse_aggregate(wire.parse_object(raw))
    try:
        # A whole collection's answers (up to the body limit): computed off the event loop.
        metrics = await asyncio.to_thread(aggregate_metrics, answers)
    except ValueError as exc:
        raise _Answer(422, wire.error_body(f"bad /aggregate_metrics body: {exc}")) from None
    return 200, jsontext.dumps(metrics), []


async def _tool(
    manager: SessionManager, session: LiveSession, name: str, raw: bytes
) -> tuple[int, bytes, Headers]:
    """One call of tool `name`, its arguments the body."""
    names = [schema["function"]["name"] for schema in session.tools]
    if name not in names:
        # Nothing reaches the environment, so no step is stored and the episode goes on as it was.
        detail = f"unknown tool {name[:80]!r}; this episode's tools: {', '.join(names) or 'none'}"
        raise _Answer(404, wire.error_body(detail))
    try:
        message = Message.model_validate(wire.assistant_tool_call(name, raw)).to_dict()
    except ValidationError as exc:
        problems = "; ".join(error["msg"] for error in exc.errors())
        raise _Answer(422, wire.error_body(f"malformed tool call: {problems}")) from None
    result = await manager.step(session.id, message)
    text = tool_reply(result.messages, result.info)
    headers = [(b"x-gym-done", b"true" if result.done else b"false")]
    if result.reward is not None:
        headers.append((b"x-gym-reward", repr(result.reward).encode()))
    if text is not None and wire.is_tool_error(text):
        return 422, wire.error_body(text), headers
    # No reply (the environment ended the episode without one): a success with an empty output.
    return 200, wire.tool_output(text or ""), headers


async def _verify(manager: SessionManager, session: LiveSession, raw: bytes) -> tuple[int, bytes, Headers]:
    """Score the episode (after its final answer, if it is open) and close it."""
    body: dict[str, Any] = wire.parse_object(raw)
    answer = wire.final_answer(body.get("response"))
    if answer is not None and not session.env.done:
        await manager.step(session.id, {"role": "assistant", "content": answer})
    result = await manager.verify(session.id)
    await manager.close(session.id)  # a rollout ends at verify: stored and committed before the 200
    return 200, wire.verify_body(body, result, session.id), []
