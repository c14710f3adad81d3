"""The warm pool: lending, scrubbing between borrowers, retiring, refilling, bursts."""

from __future__ import annotations

import asyncio

import pytest

from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import Limits, SandboxBackend

LIMITS = Limits(timeout_s=5)


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


async def test_closed_pool_refuses() -> None:
    from gym_server.sandbox.unsafe import UnsafeBackend

    pool = SandboxPool(UnsafeBackend(server_name="pool-closed"), size=0)
    await pool.aclose()
    with pytest.raises(RuntimeError):
        async with pool.acquire():
            pass
    with pytest.raises(ValueError):
        SandboxPool(UnsafeBackend(), size=-1)
