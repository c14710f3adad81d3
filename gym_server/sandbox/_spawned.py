"""Long-lived processes inside a sandbox, talked to over their stdin and stdout (a REPL, a warm server).

`exec` runs a command to its end; some environments need a process that keeps its state between calls,
such as a Python interpreter per session. `Sandbox.spawn(argv)` starts one and returns a
`SpawnedProcess`: write bytes to its stdin, read exact byte counts or lines from its stdout with a
deadline, kill it. Its stderr is discarded. It lives until killed or until its sandbox closes, under the
sandbox's limits (memory, pids, CPU quota), but without a wall-clock limit of its own: the caller
enforces one per request and kills the process when a request overruns.

On the local backends the process is its own `bwrap` (own pid namespace: killing it kills everything it
started). On Docker it is an exec whose wrapper makes it a session leader and prints its pid first, so
it can be killed with its process group through another exec.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DockerSpawned", "LocalSpawned", "SpawnedBase"]

_STDOUT = 1


class SpawnedBase:
    """Buffered exact reads over a stream of chunks that `_feed` delivers (None marks the end)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._ended = False

    def _feed(self, chunk: bytes | None) -> None:
        self._chunks.put_nowait(chunk)

    @property
    def alive(self) -> bool:
        return not self._ended

    async def read(self, size: int, timeout: float) -> bytes:  # noqa: ASYNC109 - the caller's request deadline
        """Exactly `size` bytes of stdout; EOFError when the process ended, TimeoutError past `timeout`."""
        async with asyncio.timeout(timeout):
            while len(self._buffer) < size:
                if self._ended:
                    raise EOFError("the process ended")
                chunk = await self._chunks.get()
                if chunk is None:
                    self._ended = True
                else:
                    self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def readline(self, limit: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """One line of stdout with its newline; EOFError when the process ended first (or the line runs
        past `limit` bytes: a line protocol out of step cannot be resynchronized), TimeoutError past
        `timeout` seconds (None: no deadline, for a reader that waits on the process itself)."""
        async with asyncio.timeout(timeout):
            start = 0
            while (end := self._buffer.find(b"\n", start)) < 0:
                if len(self._buffer) > limit:
                    raise EOFError(f"a line longer than {limit} bytes")
                if self._ended:
                    raise EOFError("the process ended")
                start = len(self._buffer)
                chunk = await self._chunks.get()
                if chunk is None:
                    self._ended = True
                else:
                    self._buffer += chunk
        if end + 1 > limit:
            raise EOFError(f"a line longer than {limit} bytes")
        data = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return data


class LocalSpawned(SpawnedBase):
    """A host process tree (one `bwrap`) with piped stdin and stdout."""

    def __init__(self, proc: asyncio.subprocess.Process, on_exit: Callable[[], None]) -> None:
        super().__init__()
        self.proc = proc
        self._on_exit = on_exit
        self._pump = asyncio.get_running_loop().create_task(self._read_stdout())

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            while chunk := await self.proc.stdout.read(1 << 16):
                self._feed(chunk)
        finally:
            self._feed(None)

    async def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise EOFError("the process ended") from exc

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
        self._ended = True
        self._on_exit()


class DockerSpawned(SpawnedBase):
    """A `docker exec` whose multiplexed output a thread reads and hands to the event loop."""

    def __init__(self, conn: Any, kill_group: Callable[[int], Any], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._conn = conn
        self._raw: socket.socket = getattr(conn, "_sock", conn)
        self._kill_group = kill_group
        self._loop = loop
        self.pid: int | None = None
        self._reader = threading.Thread(target=self._read_frames, name="gym-docker-spawned", daemon=True)
        self._reader.start()

    def _read_frames(self) -> None:
        from docker.utils.socket import frames_iter  # the docker SDK is an optional extra

        try:
            for stream, data in frames_iter(self._conn, tty=False):
                if stream == _STDOUT:
                    self._loop.call_soon_threadsafe(self._feed, data)
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                self._loop.call_soon_threadsafe(self._feed, None)

    async def start(self, timeout: float) -> None:  # noqa: ASYNC109
        """Read the pid line the wrapper prints before it becomes the command."""
        line = b""
        while not line.endswith(b"\n"):
            line += await self.read(1, timeout)
        self.pid = int(line)

    async def write(self, data: bytes) -> None:
        try:
            await asyncio.to_thread(self._raw.sendall, data)
        except OSError as exc:
            raise EOFError("the process ended") from exc

    async def kill(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(Exception):
                await self._kill_group(self.pid)
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._conn.close()
        self._ended = True
