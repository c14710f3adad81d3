"""ASGI middleware serving OpenEnv's HTTP step (`POST /v1/environments/{env}/openenv/step`) without FastAPI.

As `SessionFastPath` does for the native step (gym_server/api/routers/sessions.py): FastAPI's routing
and dependency solving cost more than the step itself, so a step whose body validates is answered here
by the same function the FastAPI route calls (`http.step_answer`); anything else (a body that does not
validate, another path or method) goes on to FastAPI with its body replayed, so errors come out exactly
as the route makes them.
"""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.api.asgi import read_body, replay_body
from gym_server.api.errors import on_gym_error, parse_body
from gym_server.errors import GymError
from gym_server.protocols.openenv.http import StepBody, step_answer

__all__ = ["OpenEnvStepFastPath"]

_PREFIX = "/v1/environments/"
_SUFFIX = "/openenv/step"


class OpenEnvStepFastPath:
    """Answers a valid OpenEnv HTTP step straight from the ASGI messages; passes everything else on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"] if scope["type"] == "http" else ""
        env = path[len(_PREFIX) : -len(_SUFFIX)]
        if (
            not path.endswith(_SUFFIX)
            or not path.startswith(_PREFIX)
            or not env
            or scope["method"] != "POST"
            or scope.get("root_path")
        ):
            await self.app(scope, receive, send)
            return
        try:
            raw = await read_body(receive)
        except ClientDisconnect:
            return  # the client left before the end of its body: nobody to answer
        try:
            body = parse_body(raw, StepBody)
        except RequestValidationError:
            await self.app(scope, replay_body(raw, receive), send)
            return
        try:
            answer = await step_answer(scope["app"].state.manager, env, body)
        except RequestValidationError:  # a tool call the native step refuses: the route answers the 422
            await self.app(scope, replay_body(raw, receive), send)
            return
        except GymError as exc:
            await (await on_gym_error(Request(scope), exc))(scope, receive, send)
            return
        headers = [(b"content-length", str(len(answer)).encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})
