"""The MCP server that stands for gym episodes: the SDK's low-level `Server` with the gym's handlers.

One `Server` serves every MCP session of the app; each request finds its episode through the
`Episodes` table, by the gym session id the ASGI endpoint (`endpoint.py`) put in the request's scope.
`tools/list` is the episode's tool schemas; `tools/call` is one native step with one tool call, stored
in the trajectory exactly as `POST /v1/sessions/{id}/step` stores it; `initialize` carries the
episode's opening messages as `instructions` and its ids in `_meta`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from gym_server import __version__
from gym_server.core import jsontext
from gym_server.core.errors import GymError
from gym_server.protocols.mcp import mapping
from gym_server.sdk.messages import Message
from gym_server.sessions.live import LiveSession
from gym_server.sessions.manager import SessionManager

__all__ = ["EPISODE_URL_KEY", "SCOPE_KEY", "Binding", "Episodes", "build_server", "mcp_error"]

# Where the endpoint leaves the request's gym session id, in the ASGI scope's `state` dict (which the
# SDK's `Request` for the message reads back as `request.scope`).
SCOPE_KEY = "gym_server.mcp.session_id"
# Set when the request came through an episode's own MCP URL (`episode.py`): the end of the episode is
# then said in the tool results' text, and a call after it is a tool error, since the agents that use
# those URLs read neither `_meta` nor protocol errors as "stop".
EPISODE_URL_KEY = "gym_server.mcp.episode_url"

ServerContext = ServerRequestContext[dict[str, Any], Any]


@dataclass(frozen=True, slots=True)
class Binding:
    """The gym session an MCP session stands for, and the environment whose endpoint opened it."""

    session_id: str
    env: str


class Episodes:
    """Which gym session each MCP session stands for, and the manager that holds them.

    A binding is made when the SDK answers an `initialize` with its session id, and dropped when the
    MCP session is deleted or, at the next opening, once its gym session is no longer live (closed,
    expired by the reaper), so the table never outgrows the live sessions by more than the ones that
    ended since the last MCP session opened.
    """

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager
        self._by_mcp_id: dict[str, Binding] = {}

    def __repr__(self) -> str:
        return f"Episodes(bound={len(self._by_mcp_id)})"

    def bind(self, mcp_session_id: str, binding: Binding) -> None:
        self._by_mcp_id[mcp_session_id] = binding

    def get(self, mcp_session_id: str) -> Binding | None:
        return self._by_mcp_id.get(mcp_session_id)

    def unbind(self, mcp_session_id: str) -> None:
        self._by_mcp_id.pop(mcp_session_id, None)

    def sweep(self) -> int:
        """Forget the bindings whose gym session has ended; returns how many."""
        ended = [key for key, binding in self._by_mcp_id.items() if not self._is_live(binding.session_id)]
        for key in ended:
            del self._by_mcp_id[key]
        return len(ended)

    def _is_live(self, session_id: str) -> bool:
        try:
            self.manager.get(session_id)
        except GymError:
            return False
        return True

    def live(self, ctx: ServerContext) -> LiveSession:
        """The live gym session of the request in `ctx`.

        Raises:
            MCPError: the MCP session stands for no episode, or its episode is closed or expired.
        """
        session_id = _scope_state(ctx).get(SCOPE_KEY)
        if not isinstance(session_id, str):
            raise MCPError(
                mapping.INVALID_REQUEST,
                "this MCP session stands for no live gym episode (it ended, or was opened elsewhere): "
                "open a new MCP session",
            )
        try:
            return self.manager.get(session_id)
        except GymError as exc:
            raise mcp_error(exc) from None


def _scope_state(ctx: ServerContext) -> dict[str, Any]:
    """What the endpoint put in the request's scope `state` (empty when there is no HTTP request)."""
    request = ctx.request
    state = request.scope.get("state", {}) if request is not None else {}
    return state if isinstance(state, dict) else {}


def _over_result(session: LiveSession) -> types.CallToolResult:
    """A tool call after the episode ended, through its episode URL: a tool error saying so (an
    exception in most agent frameworks' tool nodes if it were a protocol error), nothing stepped."""
    reward = session.verified.reward if session.verified is not None else None
    text = mapping.episode_over(reward, tools=True)
    meta = mapping.episode_meta(
        session.id, done=True, reward=reward, info={"done_reason": session.env.done_reason}
    )
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True, meta=meta)


def mcp_error(exc: GymError) -> MCPError:
    """`exc` in MCP's error form: its detail as the message, its problem+json fields as `data`."""
    return MCPError(mapping.error_code(exc.status), exc.detail, mapping.problem_data(exc))


def build_server(episodes: Episodes) -> Server[dict[str, Any]]:
    """The low-level MCP server whose handlers drive `episodes`' gym sessions."""
    handlers = _Handlers(episodes)
    server: Server[dict[str, Any]] = Server(
        "gym-server",
        version=__version__,
        description="Each MCP session is one gym episode; every tool call is a stored step.",
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
    )
    server.middleware.append(handlers.on_initialize)
    return server


class _Handlers:
    """The request handlers, bound to the episodes they serve (no module-level state)."""

    def __init__(self, episodes: Episodes) -> None:
        self.episodes = episodes

    async def list_tools(
        self, ctx: ServerContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        session = self.episodes.live(ctx)
        tools = [types.Tool.model_validate(mapping.mcp_tool(schema)) for schema in session.tools]
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        session = self.episodes.live(ctx)
        names = [schema["function"]["name"] for schema in session.tools]
        if params.name not in names:
            # A protocol error, as MCP's spec has it for an unknown tool: nothing reaches the
            # environment, so no step is stored and the episode goes on as it was.
            raise MCPError(
                mapping.INVALID_PARAMS,
                f"unknown tool {params.name[:80]!r}; this episode's tools: {', '.join(names) or 'none'}",
            )
        if jsontext.holds_non_finite(params.arguments):
            # The MCP library reads 1e400 as infinity; stored, the call would read `null`: refused, as the
            # native API refuses it (422), and nothing reaches the environment.
            raise MCPError(
                mapping.INVALID_PARAMS,
                "a number in the arguments is beyond the range of a double; send it as a string",
            )
        try:
            message = Message.model_validate(mapping.assistant_tool_call(params.name, params.arguments))
        except ValidationError as exc:  # e.g. text that cannot be encoded as UTF-8, as a native 422
            problems = "; ".join(error["msg"] for error in exc.errors())
            raise MCPError(mapping.INVALID_PARAMS, f"malformed tool call: {problems}") from None
        episode_url = _scope_state(ctx).get(EPISODE_URL_KEY) is True
        if episode_url and (session.env.done or session.truncated):
            return _over_result(session)
        try:
            result = await self.episodes.manager.step(session.id, message.to_dict())
        except GymError as exc:
            raise mcp_error(exc) from None
        text = mapping.tool_reply(result.messages, result.info)
        meta = mapping.episode_meta(session.id, done=result.done, reward=result.reward, info=result.info)
        if episode_url and result.done:
            over = mapping.episode_over(result.reward, tools=True)
            text = over if text is None else f"{text}\n\n{over}"
        if text is None:  # the environment ended the episode without a reply: no content, no error
            return types.CallToolResult(content=[], is_error=False, meta=meta)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            is_error=mapping.is_tool_error(text),
            meta=meta,
        )

    async def on_initialize(self, ctx: ServerContext, call_next: CallNext) -> HandlerResult:
        """Middleware: the initialize result gains the episode's opening messages and ids."""
        result = await call_next(ctx)
        if ctx.method != "initialize" or not isinstance(result, dict):
            return result
        session = self.episodes.live(ctx)
        env = session.env
        result["instructions"] = mapping.instructions(session.entry.name, env.task.id, env.messages)
        result["_meta"] = {mapping.EPISODE_META_KEY: {**session.identity(), "messages": env.messages}}
        return result
