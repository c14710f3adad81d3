"""An environment as a NeMo Gym resources server: `/v1/environments/{env}/nemo-gym/{route}`.

NeMo Gym's agents drive a resources server over plain HTTP with JSON bodies and a session cookie, so
the facade needs no package of theirs: the wire format is spoken here (`wire.py`), the routes are one
ASGI endpoint (`endpoint.py`) over the gym's `SessionManager`, and they are always served. The mapping
is in docs/protocols.md.
"""

from __future__ import annotations

import re
from typing import Final

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.protocols.nemo_gym.endpoint import NemoGymEndpoint

__all__ = ["NemoGymRoutes", "mount"]

# Environment names may hold a `/` (`reasoning_gym/chain_sum`); a route (a tool name) never does.
_PATH: Final = re.compile(r"/v1/environments/(?P<env>.+)/nemo-gym/(?P<route>[^/]+)")


class NemoGymRoutes:
    """ASGI middleware that answers the NeMo Gym paths itself and passes every other request on.

    An episode's tool calls are its hot path, as the native steps are theirs (`SessionFastPath`): FastAPI's
    routing over every route of the app cost more than the step, so the paths are matched here.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.endpoint = NemoGymEndpoint()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _PATH.fullmatch(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        scope["path_params"] = match.groupdict()
        await self.endpoint(scope, receive, send)


def mount(app: FastAPI) -> None:
    """Serve the NeMo Gym resources-server paths of every environment in `app`.

    Call it before the middleware that must see these requests first (the body limit, the JSON media
    type check) is added: the middleware added last runs first.
    """
    app.add_middleware(NemoGymRoutes)
