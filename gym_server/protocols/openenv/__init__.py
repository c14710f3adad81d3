"""An environment's episodes in OpenEnv's protocol (openenv-core 0.3.0's wire format).

`mount(app)` adds, under `/v1/environments/{env}/openenv`, OpenEnv's WebSocket session (`/ws`, what
openenv-core's `EnvClient`, `GenericEnvClient` and `MCPToolClient` connect to when given that URL as
their `base_url`), its HTTP routes (`/reset`, `/step`, `/state`) and what an OpenEnv server says about
itself (`/health`, `/metadata`, `/schema`, `/openapi.json`, `/mcp`: `info.py`). Both drive the same
`SessionManager` as `/v1/sessions`: one OpenEnv episode is one gym session. Starlette serves the
WebSocket with the `websockets` library that `uvicorn[standard]` already brings, so there is no extra to
install and nothing of openenv-core is imported; the mapping is in docs/protocols.md.
"""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI
from starlette.routing import WebSocketRoute

from gym_server.protocols.openenv import info
from gym_server.protocols.openenv.fastpath import OpenEnvFastPath
from gym_server.protocols.openenv.http import OPENENV_HTTP_PREFIX, router
from gym_server.protocols.openenv.websocket import openenv_websocket

__all__ = ["OPENENV_PREFIX", "OPENENV_WS_PATH", "OpenEnvFastPath", "mount"]

OPENENV_PREFIX: Final = OPENENV_HTTP_PREFIX
OPENENV_WS_PATH: Final = f"{OPENENV_PREFIX}/ws"


def mount(app: FastAPI) -> None:
    """Add the OpenEnv routes to `app` (the fast path of its HTTP reset and step, `OpenEnvFastPath`, is a
    stage of the app's front)."""
    app.include_router(router)
    app.include_router(info.router)
    app.router.routes.append(WebSocketRoute(OPENENV_WS_PATH, openenv_websocket))
