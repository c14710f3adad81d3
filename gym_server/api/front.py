"""The gym's own middleware (auth gate, 415 and 413 checks, the protocol fast paths) in front of FastAPI.

FastAPI wraps every request in layers of its own before the app's middleware sees it: a check whether
OpenTelemetry providers are configured (about 7 µs, environment variables read each time), Starlette's
dispatch, and its server-error, exception-telemetry and body-limit middlewares. For the episode's routes,
which the fast paths answer without routing, those layers cost more than the fast path itself. So the
middleware added to the app runs here, in front of FastAPI, under the same server-error handling
(Starlette's `ServerErrorMiddleware` with the app's catch-all handler: a 500 problem+json, the exception
logged and re-raised); only what the middleware passes on enters FastAPI, whose own layers then run as
before. Lifespan events go straight to FastAPI.

What this changes: nothing in what a client sees. Requests answered or refused in front of FastAPI
(fast paths, 401/403/413/415/429 of the checks) are not seen by FastAPI's native OpenTelemetry
instrumentation, which the gym does not configure.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["GymApp", "move_middleware_in_front"]


class GymApp(FastAPI):
    """FastAPI with `front` (the app's middleware, ending in FastAPI itself) answering HTTP and WebSocket."""

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is None or scope["type"] == "lifespan":
            await super().__call__(scope, receive, send)
            return
        if self.root_path:  # as FastAPI and Starlette set them, for the middleware in front
            scope["root_path"] = self.root_path
        scope["app"] = self
        await self.front(scope, receive, send)

    async def behind_front(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI as it serves a request: the innermost app of `front`."""
        await super().__call__(scope, receive, send)


def move_middleware_in_front(app: FastAPI) -> GymApp:
    """Turn `app` into a `GymApp` whose middleware, added so far, runs in front of FastAPI's layers.

    Call it once every middleware is added. The app keeps its identity (routes, state, handlers): only
    its class changes, since the app is built by a factory (`FastAPIOffline`) that makes a plain FastAPI.
    """
    app.__class__ = GymApp
    assert isinstance(app, GymApp)
    middleware, app.user_middleware = app.user_middleware, []
    inner: ASGIApp = app.behind_front
    for cls, args, kwargs in reversed(middleware):
        inner = cls(inner, *args, **kwargs)
    app.front = ServerErrorMiddleware(inner, handler=app.exception_handlers.get(Exception), debug=app.debug)
    return app
