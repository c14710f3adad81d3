"""Environments installed while the server runs: found on the first request that names one.

The registry is read from the entry points at start-up. A distribution installed later (`pip install
my-env` beside a running server) would stay unknown, answered 404, until a restart; so a request for a
name the registry does not hold looks for new entry points once before answering 404. The scan imports
the new distributions' modules and warms their environments, blocking work, so it runs in a worker
thread, never on the event loop; it runs at most once per `interval_s` (misses in between answer 404 at
once: an unknown name cannot make the server scan again and again), and concurrent misses share one scan.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gym_server.sdk.registry import EnvironmentEntry, Registry

__all__ = ["RESCAN_INTERVAL_S", "CatalogRescan"]

log = logging.getLogger(__name__)

# The shortest time between two scans a miss starts. A scan reads every sys.path folder's distributions
# (milliseconds) and imports only what is new.
RESCAN_INTERVAL_S = 5.0


class CatalogRescan:
    """`entry(name)`: the registry's entry, after a scan for newly installed entry points on a miss."""

    def __init__(
        self,
        registry: Registry,
        interval_s: float = RESCAN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry, self.interval_s, self._clock = registry, interval_s, clock
        self._last: float | None = None  # when the last scan started; none yet: the first miss scans
        self._lock = asyncio.Lock()
        self.scans = 0

    async def entry(self, name: str) -> EnvironmentEntry:
        """The environment `name`, looked for among newly installed entry points when unknown.

        Raises:
            EnvironmentNotFound: not installed, or not yet found (a scan ran less than `interval_s` ago).
        """
        if name not in self.registry:
            await self._rescan()
        return self.registry.get(name)

    async def _rescan(self) -> None:
        async with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self.interval_s:
                return
            self._last = now
            self.scans += 1
            found = await asyncio.to_thread(_scan_and_warm, self.registry)
            added = self.registry.merge(found)
            if added:
                log.info("found %d newly installed environments: %s", len(added), ", ".join(added))


def _scan_and_warm(registry: Registry) -> Registry:
    """In a worker thread: the new entry points' environments, with their first-use work done."""
    found = registry.scan()
    found.warm()
    return found
