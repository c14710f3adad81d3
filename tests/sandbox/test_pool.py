"""The warm pool: lending, scrubbing between borrowers, retiring, refilling, bursts."""

from __future__ import annotations

import asyncio
import random

import pytest
from gymtest import apoll

from gym_server.core.egress_policy import EgressPolicy
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import Limits, Sandbox, SandboxBackend

LIMITS = Limits(timeout_s=5)


class Gated:
    """A real backend whose starts wait at a gate (and an optional random delay), recording each sandbox.

    Holding the gate lets a test return a sandbox while a refill is still starting one.
    """

    def __init__(self, backend: SandboxBackend, *, jitter_s: float = 0.0) -> None:
        self.backend = backend
        self.name = backend.name
        self.gate = asyncio.Event()
        self.gate.set()
        self.started: list[Sandbox] = []
        self.starting = 0
        self._jitter_s = jitter_s
        self._random = random.Random(7)

    async def start(
        self,
        limits: Limits | None = None,
        *,
        session_id: str | None = None,
        egress: EgressPolicy | None = None,
    ) -> Sandbox:
        self.starting += 1
        try:
            await self.gate.wait()
            await asyncio.sleep(self._random.uniform(0, self._jitter_s))
            box = await self.backend.start(limits, session_id=session_id, egress=egress)
        finally:
            self.starting -= 1
        self.started.append(box)
        return box

    async def check(self) -> None:
        await self.backend.check()

    async def reap(self) -> int:
        return await self.backend.reap()

    async def aclose(self) -> None:
        await self.backend.aclose()

    def open_ids(self) -> set[str]:
        return {box.id for box in self.started if not box.closed}

    async def settled(self, pool: SandboxPool) -> None:
        """Wait until no start is in flight and the pool has refilled."""

        async def settled() -> bool:
            return not self.starting and pool.idle >= pool.size

        await apoll(settled, bool)


async def test_pool_lends_warm_sandboxes_and_scrubs_them(backend: SandboxBackend) -> None:
    pool = SandboxPool(backend, size=1, limits=LIMITS)
    await pool.start()
    try:
        assert pool.idle == 1
        async with pool.acquire() as first:
            await first.exec("echo secret > note; echo t > /tmp/t")
            first_id = first.id
        assert pool.idle == 1
        async with pool.acquire() as second:
            assert second.id == first_id  # reused ...
            listing = await second.exec("ls -A /work /tmp")
            assert b"note" not in listing.stdout and b"t\n" not in listing.stdout  # ... but clean
    finally:
        await pool.aclose()


async def test_pool_run_and_burst_beyond_size(backend: SandboxBackend) -> None:
    pool = SandboxPool(backend, size=1, limits=LIMITS)
    await pool.start()
    try:
        results = await asyncio.gather(*(pool.run(["python3", "-c", f"print({i} * 2)"]) for i in range(4)))
        assert [r.stdout for r in results] == [f"{i * 2}\n".encode() for i in range(4)]
        await asyncio.sleep(0.2)
        assert pool.idle == 1  # extras were closed on return
    finally:
        await pool.aclose()


async def test_pool_retires_after_max_uses(backend: SandboxBackend) -> None:
    pool = SandboxPool(backend, size=1, limits=LIMITS, max_uses=2)
    await pool.start()
    try:
        ids = []
        for _ in range(3):
            async with pool.acquire() as box:
                ids.append(box.id)
            await asyncio.sleep(0.05)
        assert ids[0] == ids[1] != ids[2]
    finally:
        await pool.aclose()


async def test_a_closed_sandbox_is_not_returned_to_the_pool(backend: SandboxBackend) -> None:
    pool = SandboxPool(backend, size=1, limits=LIMITS)
    await pool.start()
    try:
        async with pool.acquire() as box:
            await box.close()
            broken = box.id
        for _ in range(50):
            if pool.idle:
                break
            await asyncio.sleep(0.05)
        async with pool.acquire() as fresh:
            assert fresh.id != broken and (await fresh.exec("true")).ok
    finally:
        await pool.aclose()


async def test_a_sandbox_returned_during_a_refill_does_not_overfill_the_pool(backend: SandboxBackend) -> None:
    gated = Gated(backend)
    pool = SandboxPool(gated, size=1, limits=LIMITS)  # cold, as the server's pool: it fills on first loan
    try:
        async with pool.acquire():  # started on demand; the loan schedules a refill ...
            gated.gate.clear()  # ... whose start is held at the gate while this sandbox comes back
        assert gated.starting == 1
        gated.gate.set()
        await gated.settled(pool)
        assert pool.idle == 1
        assert len(gated.started) == 2 and len(gated.open_ids()) == 1  # the other one was closed, not dropped
        async with pool.acquire() as box:
            assert box is gated.started[0]  # the returned one, already warm, kept its slot
    finally:
        await pool.aclose()
    assert gated.open_ids() == set()


async def test_concurrent_returns_and_refills_keep_the_pool_bounded(backend: SandboxBackend) -> None:
    gated = Gated(backend, jitter_s=0.03)
    pool = SandboxPool(gated, size=2, limits=LIMITS, max_uses=3)
    most_idle = 0
    order = random.Random(3)

    async def borrow(index: int) -> None:
        nonlocal most_idle
        await asyncio.sleep(order.uniform(0, 0.2))
        async with pool.acquire() as box:
            await asyncio.sleep(order.uniform(0, 0.05))
            if index % 5 == 0:
                await box.close()  # broken by its run: retired, and the pool refills
        most_idle = max(most_idle, pool.idle)

    async def watch() -> None:
        nonlocal most_idle
        while True:
            most_idle = max(most_idle, pool.idle)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.gather(*(borrow(i) for i in range(30)))  # on a cold pool: refills from the start
        await gated.settled(pool)
        assert most_idle <= pool.size
        assert len(gated.started) > pool.size  # extras and replacements were started ...
        assert len(gated.open_ids()) == pool.idle == pool.size  # ... and all but the pool's were closed
    finally:
        watcher.cancel()
        await pool.aclose()
    assert gated.open_ids() == set()


async def test_closed_pool_refuses() -> None:
    from gym_server.sandbox.unsafe import UnsafeBackend

    pool = SandboxPool(UnsafeBackend(server_name="pool-closed"), size=0)
    await pool.aclose()
    with pytest.raises(RuntimeError):
        async with pool.acquire():
            pass
    with pytest.raises(ValueError):
        SandboxPool(UnsafeBackend(), size=-1)


class HeldCloses(Gated):
    """A `Gated` whose sandboxes started while `hold` is set wait in `close()` until `close_may_go`."""

    def __init__(self, backend: SandboxBackend) -> None:
        super().__init__(backend)
        self.hold = False
        self.closing = asyncio.Event()
        self.close_may_go = asyncio.Event()

    async def start(
        self,
        limits: Limits | None = None,
        *,
        session_id: str | None = None,
        egress: EgressPolicy | None = None,
    ) -> Sandbox:
        box = await super().start(limits, session_id=session_id, egress=egress)
        if self.hold:
            close = box.close

            async def held_close() -> None:
                self.closing.set()
                await self.close_may_go.wait()
                await close()

            box.close = held_close  # type: ignore[method-assign]
        return box


async def test_a_slot_freed_while_a_refill_closes_its_surplus_sandbox_is_refilled(
    bwrap_backend: SandboxBackend,
) -> None:
    """The refill that finds its slot taken (by a returning extra) closes its sandbox; if the extra's
    scrub fails meanwhile, the freed slot must still be refilled. The refill used to return after that
    close, and no new refill could be scheduled while it was still running: the pool stayed a sandbox
    short for good (a CI flake of the concurrency test above)."""
    gated = HeldCloses(bwrap_backend)
    pool = SandboxPool(gated, size=1, limits=LIMITS)
    await pool.start()
    try:
        member = pool.acquire()
        first = await member.__aenter__()
        extra = pool.acquire()
        second = await extra.__aenter__()  # the pool is empty: an extra is started
        scrub_may_end = asyncio.Event()

        async def failing_scrub() -> bool:
            await scrub_may_end.wait()
            return False

        second.scrub = failing_scrub  # type: ignore[method-assign]
        gated.gate.clear()
        await first.close()
        await member.__aexit__(None, None, None)  # retired: a refill starts and waits at the gate
        assert gated.starting == 1
        returning = asyncio.create_task(extra.__aexit__(None, None, None))  # takes the free slot
        await asyncio.sleep(0)
        gated.hold = True
        gated.gate.set()
        await gated.closing.wait()  # the refill's sandbox found no room and is being closed ...
        gated.hold = False
        scrub_may_end.set()  # ... when the extra's scrub fails and frees the slot
        await returning
        gated.close_may_go.set()
        await gated.settled(pool)
        assert pool.idle == 1 and len(gated.open_ids()) == 1
    finally:
        gated.close_may_go.set()
        await pool.aclose()
    assert gated.open_ids() == set()
