"""MCP's stdio transport over a process in a gym sandbox, for the SDK's `ClientSession`.

The SDK's own `stdio_client` starts the server as a host process; here the server is a
`SpawnedProcess` inside the session's sandbox, so this module does what `stdio_client` does with its
pipes and nothing else: one JSON-RPC message per line each way (the transport the MCP spec defines),
a line that does not parse handed to the session as an exception (as the SDK does), and the read
stream closed when the process ends, so every request waiting on it fails at once instead of hanging.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from gym_server.sdk.runtime import SpawnedProcess

__all__ = ["MAX_LINE_BYTES", "sandbox_stdio"]

MAX_LINE_BYTES = 4 * 1024 * 1024  # one JSON-RPC message; a server flooding past it is treated as gone


@asynccontextmanager
async def sandbox_stdio(
    process: SpawnedProcess,
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The (read, write) streams of an MCP session with `process`; the caller kills the process."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def pump_out() -> None:
        async with read_writer:
            while True:
                try:
                    line = await process.readline(MAX_LINE_BYTES)
                except EOFError:
                    return  # the server exited (or flooded): closing the stream fails its waiters
                if not line.strip():
                    continue
                try:
                    item: SessionMessage | Exception = SessionMessage(
                        mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    )
                except ValueError as exc:
                    item = exc
                try:
                    await read_writer.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def pump_in() -> None:
        async with write_reader:
            async for message in write_reader:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await process.write(data.encode() + b"\n")
                except EOFError:
                    await read_writer.aclose()
                    return

    async with anyio.create_task_group() as group:
        group.start_soon(pump_out)
        group.start_soon(pump_in)
        try:
            yield read_stream, write_stream
        finally:
            group.cancel_scope.cancel()
            await read_stream.aclose()
            await write_stream.aclose()
