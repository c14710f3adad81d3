"""One MCP client session with one server, for the length of an episode.

The SDK's `ClientSession` lives in an anyio task group, which must be entered and left by the same
task; an episode's `setup()` and `close()` run in different requests (different tasks). So one
background task owns the session: it opens the transport (stdio to a process in the sandbox, or
streamable HTTP), connects, lists the tools, then waits for `close()`; tool calls from any task go
through the session it opened. When the server goes away, the transport closes the read stream and
every call waiting on it fails at once; `alive` then turns False.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import mcp_types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from gym_env_mcp_tools.transport import sandbox_stdio
from gym_server.protocols.mcp.mapping import tool_result_text
from gym_server.sdk.runtime import SpawnedProcess

__all__ = ["McpConnection", "McpServerGone", "http_streams"]

_MAX_TOOL_PAGES = 32  # tools/list pages followed; a server paging forever is cut off


class McpServerGone(Exception):
    """The server did not start, or stopped answering for good (it exited or broke the protocol)."""


Streams = AbstractAsyncContextManager[tuple[Any, Any]]


def http_streams(url: str) -> Callable[[], Streams]:
    """The transport of a server at `url` (streamable HTTP; the session is deleted when it closes)."""
    return lambda: streamable_http_client(url)


class McpConnection:
    """The client side of one MCP server: `start()`, `call()` as often as needed, `close()`.

    Args:
        transport: opens the (read, write) streams; `sandbox_stdio` over `process` when None.
        process: the server's process in the sandbox (stdio servers); its end means the server is gone.
    """

    def __init__(
        self, process: SpawnedProcess | None = None, transport: Callable[[], Streams] | None = None
    ) -> None:
        if transport is None:
            if process is None:
                raise ValueError("a transport or a process is needed")
            transport = lambda: sandbox_stdio(process)  # noqa: E731 - bound to this process
        self.process = process
        self.transport = transport
        self.tools: list[dict[str, Any]] = []
        self.server_info: dict[str, Any] = {}
        self._session: ClientSession | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"McpConnection(server={self.server_info.get('name')!r}, alive={self.alive})"

    @property
    def alive(self) -> bool:
        running = self._task is not None and not self._task.done()
        return running and (self.process is None or self.process.alive)

    async def start(self, timeout_s: float) -> None:
        """Connect, initialize and list the tools (all pages) within `timeout_s`.

        Raises:
            McpServerGone: the server exited, spoke something other than MCP, or took too long.
        """
        self._task = asyncio.get_running_loop().create_task(self._run(), name="gym-mcp-client")
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._ready)
        except TimeoutError:
            raise McpServerGone(f"the MCP server did not initialize within {timeout_s:g} s") from None

    async def _run(self) -> None:
        try:
            async with self.transport() as (read, write), ClientSession(read, write) as session:
                initialized = await session.initialize()
                self.server_info = initialized.server_info.model_dump(mode="json", exclude_none=True)
                cursor: str | None = None
                for _ in range(_MAX_TOOL_PAGES):
                    params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await session.list_tools(params=params)
                    self.tools += [
                        tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in page.tools
                    ]
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._session = session
                self._ready.set_result(None)
                await self._closing.wait()
        except Exception as exc:  # whatever broke the session, the waiter learns it, not the loop
            if not self._ready.done():
                self._ready.set_exception(McpServerGone(f"the MCP server failed to start: {_describe(exc)}"))

    async def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """Call a tool and return the text of its result; the server's own errors come back as text.

        Raises:
            McpServerGone: the server is gone, so no call can succeed any more.
            TimeoutError: no answer within `timeout_s` (the server may still be alive).
        """
        if self._session is None or not self.alive:
            raise McpServerGone("the MCP server is not running")
        try:
            async with asyncio.timeout(None if math.isinf(timeout_s) else timeout_s):
                result = await self._session.call_tool(name, arguments)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or not self.alive:
                raise McpServerGone(f"the MCP server exited ({exc.message})") from exc
            # The server's JSON-RPC error (invalid params, unknown tool), as the model reads it.
            return f"Error: {exc.message} (MCP error {exc.code})"
        except TimeoutError:
            raise  # an OSError too, but the server may be alive: the caller decides
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            raise McpServerGone(f"the MCP server is gone ({_describe(exc)})") from exc
        return tool_result_text(result.model_dump(by_alias=True, exclude_none=True, mode="json"))

    async def close(self) -> None:
        """End the session and its task (the caller kills the process); idempotent."""
        self._closing.set()
        if self._task is not None and not self._task.done():
            try:
                async with asyncio.timeout(2.0):
                    await self._task
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc)[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
