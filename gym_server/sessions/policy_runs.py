"""`PolicyRuns`: the rollout buffer's service, between the routes (and the gateway) and the store.

Each change (announce, admit, pull, acknowledge) is one committed transaction in a worker thread
(`store.buffer` does the work, `TrajectoryStore.transact` commits it), so the event loop never waits on
the database and an answer means committed. A pull may wait for ready groups (`wait_s`): it polls the
store every `poll_s` with `asyncio.sleep` in between, holding no connection and no lock while it waits.

The gateway asks `current_version` on every model call it forwards, to record which version sampled it.
That answer is cached per run for `cache_s`: a replica that did not take the announcement itself learns
it within that time, and the version it records is the one announced when the call reached it.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial

from gym_server.core.errors import BufferFull, PolicyRunNotFound, StoreUnavailable
from gym_server.store import buffer
from gym_server.store.buffer import Acknowledgement, Announcement, Handout, RunState
from gym_server.store.records import DEFAULT_TENANT
from gym_server.store.writer import TrajectoryStore

__all__ = ["PolicyRuns"]


class PolicyRuns:
    """The policy runs of one server: announcements, group admission, pulls and acknowledgements.

    Args:
        store: the trajectory store whose database keeps the buffer's state.
        cache_s: how long `current_version` trusts what it read of a run.
        poll_s: how often a waiting pull looks again.
    """

    def __init__(self, store: TrajectoryStore, *, cache_s: float = 1.0, poll_s: float = 0.25) -> None:
        self.store = store
        self.cache_s = cache_s
        self.poll_s = poll_s
        self._versions: dict[tuple[str, str], tuple[float, int | None]] = {}

    def __repr__(self) -> str:
        return f"PolicyRuns(cached={len(self._versions)})"

    async def announce(self, tenant: str | None, run: str, said: Announcement) -> RunState:
        tenant = tenant or DEFAULT_TENANT
        state = await self.store.transact(partial(buffer.announce, tenant=tenant, run=run, said=said))
        self._versions[tenant, run] = (time.monotonic(), state.version)
        return state

    async def state(self, tenant: str | None, run: str) -> RunState:
        return await self.store.read(partial(buffer.run_state, tenant=tenant or DEFAULT_TENANT, run=run))

    async def admit(
        self,
        tenant: str | None,
        run: str,
        *,
        size: int,
        env: str | None,
        task_id: str | None,
        wait_s: float = 0.0,
    ) -> tuple[str, int]:
        """Admit one group; while the buffer is full, look again every `poll_s` for up to `wait_s`
        (a producer waiting here starts the moment the trainer's announcement makes room).

        Raises:
            BufferFull: still full after `wait_s`.
        """
        deadline = time.monotonic() + wait_s
        admit = partial(buffer.admit_group, tenant=tenant or DEFAULT_TENANT, run=run)
        while True:
            try:
                return await self.store.transact(partial(admit, size=size, env=env, task_id=task_id))
            except BufferFull:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                await asyncio.sleep(min(self.poll_s, left))

    async def pull(
        self, tenant: str | None, run: str, *, max_groups: int, min_groups: int, lease_s: float, wait_s: float
    ) -> Handout:
        """Lease up to `max_groups` ready groups once at least `min_groups` are ready, waiting up to
        `wait_s` for them; none (an empty hand-out) when they are not ready by then.

        Fewer than `min_groups` leases nothing, so a trainer waiting for a whole batch never holds part of
        it under a lease that could expire meanwhile.
        """
        deadline = time.monotonic() + wait_s
        pull = partial(buffer.pull, tenant=tenant or DEFAULT_TENANT, run=run, lease_s=lease_s)
        while True:
            handout = await self.store.transact(partial(pull, max_groups=max_groups, min_groups=min_groups))
            left = deadline - time.monotonic()
            if handout.groups or left <= 0:
                return handout
            await asyncio.sleep(min(self.poll_s, left))

    async def acknowledge(self, tenant: str | None, run: str, lease_id: str) -> Acknowledgement:
        ack = partial(buffer.acknowledge, tenant=tenant or DEFAULT_TENANT, run=run, lease_id=lease_id)
        return await self.store.transact(ack)

    async def current_version(self, tenant: str, run: str | None) -> int | None:
        """The run's announced version (cached up to `cache_s`), or None for a run never announced."""
        if run is None:
            return None
        now = time.monotonic()
        cached = self._versions.get((tenant, run))
        if cached is not None and now - cached[0] < self.cache_s:
            return cached[1]
        try:
            version: int | None = (await self.state(tenant, run)).version
        except PolicyRunNotFound:
            version = None
        except StoreUnavailable:  # a model call is not refused for it: the last known version serves
            return None if cached is None else cached[1]
        self._versions[tenant, run] = (now, version)
        return version
