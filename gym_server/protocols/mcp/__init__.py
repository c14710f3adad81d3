"""An environment's episodes as an MCP server over streamable HTTP (the `[mcp]` extra).

`mount(app)` adds the routes `/v1/environments/{env}/mcp` and `/v1/sessions/{session_id}/mcp` (an
existing episode's tools, see `episode`) when the `mcp` package is importable, and
`serving(app, manager, settings)` runs the SDK's session manager inside the app's lifespan; without
the extra both do nothing, so the service starts as before. One MCP session is one gym session; the
mapping is in docs/protocols.md, the choices in docs/decisions.md.

This module imports nothing from `mcp` itself, so importing it costs nothing on a base install.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import AsyncIterator
from typing import Final

from fastapi import FastAPI

from gym_server.core.settings import Settings
from gym_server.sessions.manager import SessionManager

__all__ = ["MCP_PATH", "available", "mount", "serving"]

MCP_PATH: Final = "/v1/environments/{env:path}/mcp"  # a family member's name holds a slash


def available() -> bool:
    """Whether the `mcp` package (the `[mcp]` extra) is installed."""
    return importlib.util.find_spec("mcp") is not None


def mount(app: FastAPI) -> bool:
    """Add the MCP route to `app` if the extra is installed; returns whether it did."""
    if not available():
        return False
    from starlette.routing import Route

    from gym_server.protocols.mcp.endpoint import McpEndpoint
    from gym_server.protocols.mcp.episode import EPISODE_MCP_PATH, EpisodeMcpEndpoint

    # A Route whose endpoint is not a function is a raw ASGI app, answering every method (the SDK
    # decides which it serves: POST, GET for the event stream, DELETE).
    app.router.routes.append(Route(MCP_PATH, McpEndpoint(), include_in_schema=False))
    # An existing episode's tools, the episode named by the URL (docs/gateway.md).
    app.router.routes.append(Route(EPISODE_MCP_PATH, EpisodeMcpEndpoint(), include_in_schema=False))
    return True


@contextlib.asynccontextmanager
async def serving(app: FastAPI, manager: SessionManager, settings: Settings) -> AsyncIterator[None]:
    """Run the MCP facade for as long as the block; `app.state.mcp` is set meanwhile (None without
    the extra). Leaving it ends every MCP session's task; their gym sessions are then the manager's
    to record (lost, at shutdown), like every other live session."""
    if not available():
        app.state.mcp = None
        yield
        return
    from gym_server.protocols.mcp.endpoint import McpFacade
    from gym_server.protocols.mcp.server import Episodes

    facade = McpFacade(Episodes(manager), settings)
    # The SDK's manager holds an anyio task group, which must be left by the task that entered it; a
    # lifespan may be entered and left by different tasks (pytest-asyncio fixtures do), so one task of
    # our own holds it for the whole block.
    running, stopping = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with facade.sdk.run():
            running.set()
            await stopping.wait()

    holder = asyncio.get_running_loop().create_task(hold(), name="gym-server mcp facade")
    started = asyncio.ensure_future(running.wait())
    await asyncio.wait([holder, started], return_when=asyncio.FIRST_COMPLETED)
    if not running.is_set():
        started.cancel()
        await holder  # it ended before it ran: raise what it raised
    app.state.mcp = facade
    try:
        yield
    finally:
        app.state.mcp = None
        stopping.set()
        await holder
