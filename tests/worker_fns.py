"""Module-level functions the worker-pool tests send to child processes (which import them by name)."""

from __future__ import annotations

import os
import subprocess
import time

__all__ = ["add", "allocate", "crash", "fail", "pid", "sleep_then", "spawn_grandchild", "spin", "unpicklable"]


def add(a: int, b: int) -> int:
    return a + b


def pid() -> int:
    return os.getpid()


def sleep_then(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def spin() -> int:
    """Busy-loop in C (a giant integer power), where no signal-based timeout could interrupt it."""
    return len(str(9 ** (9**9)))


def crash(code: int) -> None:
    os._exit(code)


def fail(message: str) -> None:
    raise ValueError(message)


def unpicklable() -> object:
    return lambda: None


def allocate(megabytes: int) -> int:
    return len(bytearray(megabytes << 20))


def spawn_grandchild() -> int:
    """Start a sleeping grandchild and return its pid (to prove a kill takes the whole group)."""
    return subprocess.Popen(["sleep", "60"]).pid
