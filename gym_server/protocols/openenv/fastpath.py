"""The front's fast path of OpenEnv's HTTP reset and step (`POST /v1/environments/{env}/openenv/{reset,step}`)
without FastAPI.

As `SessionFastPath` does for the native routes (gym_server/api/routers/sessions.py): FastAPI's routing
and dependency solving cost more than a step itself, so a request whose body validates is answered here
by the same function the FastAPI route calls (`http.reset_answer`, `http.step_answer`); anything else (a
body that does not validate, another path or method) goes on to FastAPI with its body replayed, so
errors come out exactly as the route makes them. Measured at 256 clients before the reset came here:
its FastAPI route cost as much server time per episode as two steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from fastapi.exceptions import RequestValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.core.asgi import read_body, replay_body
from gym_server.core.errors import GymError
from gym_server.core.problems import on_gym_error
from gym_server.protocols.openenv.http import reset_answer, step_answer
from gym_server.sessions.manager import SessionManager

__all__ = ["OpenEnvFastPath"]

_PREFIX = "/v1/environments/"
_Answer = Callable[[SessionManager, str, bytes], Awaitable[bytes]]
_ROUTES: dict[str, _Answer] = {"step": step_answer, "reset": reset_answer}


class OpenEnvFastPath:
    """A stage of the gym's front (`core.asgi.Stage`) answering a valid OpenEnv HTTP reset or step
    straight from the ASGI messages."""

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        """The app answering an OpenEnv reset or step; None for any other request."""
        path: str = scope["path"] if scope["type"] == "http" else ""
        head, _, route = path.rpartition("/openenv/")
        answer_for = _ROUTES.get(route)
        env = head[len(_PREFIX) :]
        if (
            answer_for is None
            or not head.startswith(_PREFIX)
            or not env
            or scope["method"] != "POST"
            or scope.get("root_path")
        ):
            return None
        return partial(_answer, answer_for=answer_for, env=env, rest=rest)


async def _answer(
    scope: Scope, receive: Receive, send: Send, *, answer_for: _Answer, env: str, rest: ASGIApp
) -> None:
    try:
        raw = await read_body(receive)
    except ClientDisconnect:
        return  # the client left before the end of its body: nobody to answer
    try:
        answer = await answer_for(scope["app"].state.manager, env, raw)
    except RequestValidationError:  # the route answers the 422, in FastAPI's own form
        await rest(scope, replay_body(raw, receive), send)
        return
    except GymError as exc:
        await (await on_gym_error(Request(scope), exc))(scope, receive, send)
        return
    headers = [(b"content-length", str(len(answer)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})
