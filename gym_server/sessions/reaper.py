"""The reaper: a background task that expires idle sessions and snapshots live ones to the store.

It is the only timer in the session layer. Snapshots bound what a killed server can lose to one
interval of transcript, without a database round trip on the step path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gym_server.sessions.manager import SessionManager

__all__ = ["Reaper"]

log = logging.getLogger(__name__)


class Reaper:
    """Expires idle sessions every `interval_s`; snapshots live ones every `snapshot_every` rounds."""

    def __init__(self, manager: SessionManager, interval_s: float, snapshot_every: int = 5) -> None:
        self.manager = manager
        self.interval_s = interval_s
        self.snapshot_every = max(1, snapshot_every)
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"Reaper(interval_s={self.interval_s}, running={self.running})"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="gym-session-reaper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        rounds = 0
        while True:
            await asyncio.sleep(self.interval_s)
            rounds += 1
            try:
                reaped = await self.manager.reap_expired()
                if reaped:
                    log.info("reaped %d idle sessions", reaped)
                if rounds % self.snapshot_every == 0:
                    self.manager.snapshot_dirty()
            except Exception:  # the reaper must outlive any one bad session
                log.exception("reaper round failed")
