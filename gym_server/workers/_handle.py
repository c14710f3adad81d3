"""The parent's handle on one worker process: starting it, waiting for its handshake, killing, reaping."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import cast

from gym_server.workers._child import READY, serve
from gym_server.workers.errors import WorkerCrashed

__all__ = ["REAP_TIMEOUT_S", "Worker", "spawn_worker"]

REAP_TIMEOUT_S = 5.0


class Worker:
    """One child process and the parent's end of its pipe."""

    __slots__ = ("calls", "conn", "pid", "process")

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.pid = cast(int, process.pid)
        self.calls = 0

    def __repr__(self) -> str:
        return f"Worker(pid={self.pid}, calls={self.calls})"

    def signal_kill(self) -> None:
        """SIGKILL the worker's process group now; cheap, safe from any thread, reaping comes later."""
        if self.process.exitcode is not None:
            return  # already reaped: its pid may belong to someone else by now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ValueError, OSError):
            self.process.kill()

    def reap(self) -> None:
        """Kill, join and release the worker's resources; idempotent."""
        self.signal_kill()
        with contextlib.suppress(ValueError, AssertionError):
            self.process.join(REAP_TIMEOUT_S)
        self.conn.close()


def spawn_worker(
    ctx: ForkServerContext | SpawnContext,
    *,
    name: str,
    preload: tuple[str, ...],
    initializer: Callable[[], object] | None,
    memory_limit_bytes: int | None,
    start_timeout_s: float,
) -> Worker:
    """Start one worker and wait for its handshake (blocking); `WorkerCrashed` when it does not come."""
    parent_conn, child_conn = ctx.Pipe(duplex=True)
    process = ctx.Process(
        target=serve,
        args=(child_conn, preload, initializer, memory_limit_bytes, isinstance(ctx, ForkServerContext)),
        name=f"{name}-worker",
        daemon=True,
    )
    try:
        process.start()
    except Exception as exc:  # out of pids or fds, or started from a daemonic process
        parent_conn.close()
        raise WorkerCrashed(f"could not start a worker: {type(exc).__name__}: {exc}") from exc
    finally:
        child_conn.close()
    worker = Worker(process, parent_conn)
    try:
        if not parent_conn.poll(start_timeout_s):
            raise WorkerCrashed(f"worker {worker.pid} did not start within {start_timeout_s:g} s")
        if parent_conn.recv_bytes() != READY:
            raise WorkerCrashed(f"worker {worker.pid} sent a bad handshake")
    except (EOFError, OSError) as exc:
        worker.reap()
        raise WorkerCrashed(
            f"worker {worker.pid} died while starting (exit code {process.exitcode})"
        ) from exc
    except BaseException:
        worker.reap()
        raise
    return worker
