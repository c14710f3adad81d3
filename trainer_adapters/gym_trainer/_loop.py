"""A private event loop in a daemon thread, for running async code from blocking callers.

Trainers call adapters synchronously (TRL's `rollout_func`, a reward function, a script), while the
client and the driver are async so that many episodes overlap. `asyncio.run` per call would rebuild
the connection pool every time and fails inside a running loop (Jupyter); this keeps one loop alive.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["BackgroundLoop"]

T = TypeVar("T")


class BackgroundLoop:
    """Runs coroutines on one long-lived loop; `run` blocks the caller until the result is ready."""

    def __init__(self, name: str = "gym-adapter-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"BackgroundLoop(running={self.running})"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the background loop and return its result (or raise its exception)."""
        if not self.running:
            coro.close()
            raise RuntimeError("the background loop is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if not self.running:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
