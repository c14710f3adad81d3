"""The gym's front: its checks (host, auth, media type, body size) and the protocol fast paths, in
front of FastAPI.

FastAPI wraps every request in layers of its own before the app's middleware sees it: a check whether
OpenTelemetry providers are configured (about 7 µs, environment variables read each time), Starlette's
dispatch, and its server-error, exception-telemetry and body-limit middlewares. For the episode's routes,
which the fast paths answer without routing, those layers cost more than the fast path itself. So the
gym's own checks and fast paths run here, in front of FastAPI, with the same server-error answer as
Starlette's (the app's catch-all: a 500 problem+json, the exception logged and re-raised); only what
they pass on enters FastAPI, whose own layers then run as before. Lifespan events go straight to
FastAPI.

They are stages (`gym_server.core.asgi.Stage`), not ASGI middleware: each looks at the scope and either
lets the request go on or returns the app that takes it over, so a request passes the checks in one
frame and the traceback of a failure names the stage that took it. Why, and what it measured:
docs/decisions.md, "The front: stages, not middleware".

What this changes: nothing in what a client sees. Requests answered or refused in front of FastAPI
(fast paths, 401/403/413/415/421/429 of the checks) are not seen by FastAPI's native OpenTelemetry
instrumentation, which the gym does not configure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.core.asgi import Stage
from gym_server.core.looplag import LoopLagMonitor
from gym_server.core.problems import on_unexpected_error

__all__ = ["ErrorHandler", "Front", "GymApp", "serve_through_front"]

ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


class Front:
    """An ASGI app running `stages` in order for each HTTP request and WebSocket handshake, then `app`.

    The first stage that takes a request answers it (a refusal, a fast path) or hands it on itself; a
    request no stage takes goes to `app`. With a `monitor`, every request is in its table of requests in
    flight while it is served, refused ones included, so a stall of the event loop names them. Other
    scopes (lifespan) go straight to `app`.
    """

    def __init__(
        self,
        stages: Sequence[Stage],
        app: ASGIApp,
        monitor: LoopLagMonitor | None = None,
        on_error: ErrorHandler | None = None,
    ) -> None:
        self.stages = tuple(stages)
        self.app = app
        self.monitor = monitor
        self.on_error = on_error
        # What each stage hands a request on to: the stages after it, then `app`.
        self._rests = [_Rest(self, index + 1) for index in range(len(self.stages))]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)
            return
        monitor = self.monitor
        token = 0 if monitor is None else monitor.request_started(scope.get("method", "WS"), scope["path"])
        try:
            await self.route(scope, 0)(scope, receive, send)
        except Exception as exc:
            if self.on_error is not None and kind == "http":
                await self._answer_failure(scope, receive, send, exc)
            raise  # the server sees it too: it logs it, and answers or closes as it can
        finally:
            if monitor is not None:
                monitor.request_finished(token)

    async def _answer_failure(self, scope: Scope, receive: Receive, send: Send, exc: Exception) -> None:
        """Answer `on_error`'s response (a 500 problem+json) unless the response had begun.

        Whether it had is not tracked (a wrapper around `send` would cost every request a call per
        message): an ASGI server refuses a second `http.response.start`, and that refusal says so.
        """
        assert self.on_error is not None
        response = await self.on_error(Request(scope), exc)
        with contextlib.suppress(Exception):  # refused: the client got the start of the real answer
            await response(scope, receive, send)

    def route(self, scope: Scope, first: int) -> ASGIApp:
        """The app that serves the request: the first stage's from `first` on that takes it, else `app`."""
        stages, rests = self.stages, self._rests
        for index in range(first, len(stages)):
            taken = stages[index].take(scope, rests[index])
            if taken is not None:
                return taken
        return self.app


class _Rest:
    """The stages of a front after one of them, then its app: what that stage hands a request on to."""

    def __init__(self, front: Front, first: int) -> None:
        self.front = front
        self.first = first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.front.route(scope, self.first)(scope, receive, send)


class GymApp(FastAPI):
    """FastAPI with `front` (the gym's stages, ending in FastAPI itself) answering HTTP and WebSocket."""

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is None or scope["type"] == "lifespan":
            await super().__call__(scope, receive, send)
            return
        if self.root_path:  # as FastAPI and Starlette set them, for the stages in front
            scope["root_path"] = self.root_path
        scope["app"] = self
        await self.front(scope, receive, send)

    async def behind_front(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI as it serves a request: the app behind the front."""
        await super().__call__(scope, receive, send)


def serve_through_front(app: FastAPI, stages: Sequence[Stage], monitor: LoopLagMonitor) -> GymApp:
    """Turn `app` into a `GymApp` whose HTTP requests and WebSocket handshakes pass `stages` first.

    The app keeps its identity (routes, state, handlers): only its class changes, since the app is built
    by a factory (`FastAPIOffline`) that makes a plain FastAPI. Middleware added with `add_middleware`
    would still run, inside FastAPI's own layers; the gym adds none.
    """
    app.__class__ = GymApp
    assert isinstance(app, GymApp)
    app.front = Front(stages, app.behind_front, monitor, on_error=on_unexpected_error)
    return app
