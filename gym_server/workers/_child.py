"""The worker process's side: set itself up, report ready, then run pickled calls until the pipe closes."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import pickle
import resource
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection

from gym_server.workers.errors import WorkerError

__all__ = ["READY", "serve"]

READY = b"ready"
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def serve(
    conn: Connection,
    preload: tuple[str, ...],
    initializer: Callable[[], object] | None,
    memory_limit_bytes: int | None,
    die_with_parent: bool,
) -> None:
    """A worker's main loop: run pickled calls until the parent closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setpgid(0, 0)  # its own group, so a kill takes any grandchildren with it
    if die_with_parent:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if memory_limit_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    for module in preload:
        importlib.import_module(module)
    if initializer is not None:
        initializer()
    conn.send_bytes(READY)
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):
            return
        conn.send_bytes(_execute(request))


def _execute(request: bytes) -> bytes:
    """Run one pickled call and pickle its outcome; nothing the call does can break the protocol."""
    try:
        fn, args = pickle.loads(request)
        reply: tuple[bool, object, str] = (True, fn(*args), "")
    except Exception as exc:
        reply = (False, exc, traceback.format_exc())
    try:
        return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an unpicklable result or exception still gets an answer
        failure = WorkerError(f"the worker's reply could not be pickled: {type(exc).__name__}: {exc}")
        return pickle.dumps((False, failure, reply[2]), protocol=pickle.HIGHEST_PROTOCOL)
