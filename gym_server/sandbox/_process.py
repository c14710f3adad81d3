"""Running one host process with a deadline and capped output, for the local backends.

The process is started in a new session so the whole group can be killed at once; a `kill_tree`
callback lets the caller kill more than the group (a cgroup, a pid namespace) when the deadline passes.
Both output streams are drained concurrently to the end, keeping only the first bytes of each: a program
that writes 100 MB costs a pipe's worth of memory, and a full pipe never deadlocks it. Nothing here
blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gym_server.sandbox.protocol import SIGKILL_EXIT, CappedBuffer

__all__ = ["RawRun", "exit_status", "run_capped"]

_READ_CHUNK = 1 << 16
_DRAIN_AFTER_KILL_S = 2.0


@dataclass(slots=True)
class RawRun:
    """What the host saw of one process: the shell-style exit code, both streams, the deadline."""

    exit_code: int
    stdout: CappedBuffer
    stderr: CappedBuffer
    timed_out: bool
    duration_s: float


def exit_status(returncode: int | None) -> int:
    """asyncio's return code (negative for a signal) as a shell-style status (128+N)."""
    if returncode is None:
        return SIGKILL_EXIT
    return 128 - returncode if returncode < 0 else returncode


async def _pump(stream: asyncio.StreamReader | None, sink: CappedBuffer) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_READ_CHUNK):
        sink.write(chunk)


async def _feed(writer: asyncio.StreamWriter | None, data: bytes) -> None:
    if writer is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
        writer.close()
        await writer.wait_closed()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_capped(
    argv: Sequence[str],
    *,
    stdin: bytes | None,
    env: Mapping[str, str],
    cwd: str | None,
    limit_s: float,
    output_bytes: int,
    kill_tree: Callable[[], None] | None = None,
    pass_fds: tuple[int, ...] = (),
    after_spawn: Callable[[], None] | None = None,
) -> RawRun:
    """Run `argv` to its end or its deadline; the process group (and `kill_tree`) is killed at the deadline.

    `pass_fds` are inherited by the process; `after_spawn` runs once it exists (to close our copies).

    Raises:
        OSError: the program could not be started at all (missing binary, bad cwd).
    """
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
        pass_fds=pass_fds,
    )
    if after_spawn is not None:
        after_spawn()
    out, err = CappedBuffer(output_bytes), CappedBuffer(output_bytes)
    pumps = asyncio.gather(_pump(proc.stdout, out), _pump(proc.stderr, err), _feed(proc.stdin, stdin or b""))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), limit_s)
    except TimeoutError:
        timed_out = True
    except BaseException:  # cancelled: nothing may outlive the caller's interest in it
        _kill_group(proc.pid)
        if kill_tree is not None:
            kill_tree()
        pumps.cancel()
        with contextlib.suppress(BaseException):
            await proc.wait()
        raise
    # Whether it finished or not, anything left of the run goes now: a background child holding the
    # pipes open would otherwise keep the readers waiting.
    _kill_group(proc.pid)
    if kill_tree is not None:
        kill_tree()
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(proc.wait(), _DRAIN_AFTER_KILL_S)
    try:
        await asyncio.wait_for(pumps, _DRAIN_AFTER_KILL_S)
    except (TimeoutError, OSError):
        pumps.cancel()
    duration = time.perf_counter() - started
    code = SIGKILL_EXIT if timed_out else exit_status(proc.returncode)
    return RawRun(code, out, err, timed_out, duration)
