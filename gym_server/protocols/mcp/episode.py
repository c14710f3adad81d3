"""The ASGI endpoint `/v1/sessions/{session_id}/mcp`: an existing episode's tools over MCP.

The facade at `/v1/environments/{env}/mcp` opens a gym episode per MCP session, so the episode's
identity is the MCP session. Agent frameworks do not keep one: langchain-mcp-adapters' `get_tools()`
opens a new MCP session for every tool call, and neither it nor the MCP TypeScript SDK's `Client`
reads the initialize result's `_meta`. Here the episode is in the URL: every MCP session opened on it,
however many and for however long, acts on that one episode, and ending an MCP session (its DELETE)
ends nothing of the episode, which the gym's native DELETE (or `/answer`) closes. The SDK's session
manager and handlers are the facade's own (`McpFacade`); this endpoint only checks the episode and
names it in the request's scope. The handshake protocol versions are served (2024-11-05 to
2025-11-25: the `mcp` 1.x clients, langchain-mcp-adapters among them, and 2.x).
"""

from __future__ import annotations

from typing import Final

from starlette.types import Receive, Scope, Send

from gym_server.core.errors import GymError
from gym_server.protocols.mcp import mapping
from gym_server.protocols.mcp.endpoint import McpFacade, refuse_version, send_error, send_gym_error
from gym_server.protocols.mcp.server import EPISODE_URL_KEY, SCOPE_KEY

__all__ = ["EPISODE_MCP_PATH", "EpisodeMcpEndpoint"]

EPISODE_MCP_PATH: Final = "/v1/sessions/{session_id}/mcp"


class EpisodeMcpEndpoint:
    """The ASGI app of the route; finds the running `McpFacade` on `app.state.mcp`."""

    def __repr__(self) -> str:
        return "EpisodeMcpEndpoint()"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        facade: McpFacade | None = getattr(scope["app"].state, "mcp", None)
        if facade is None:
            await send_error(send, 503, mapping.INTERNAL_ERROR, "the MCP facade is not running", None)
            return
        if await refuse_version(scope, send):
            return
        session_id: str = scope["path_params"]["session_id"]
        try:
            facade.episodes.manager.get(session_id)  # 404 unknown (or another tenant's), 410 closed
        except GymError as exc:
            await send_gym_error(send, exc, None)
            return
        state = scope.setdefault("state", {})
        state[SCOPE_KEY], state[EPISODE_URL_KEY] = session_id, True
        await facade.sdk.handle_request(scope, receive, send)
