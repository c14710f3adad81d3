"""The event-loop lag monitor: a stall is measured, exported on /metrics and named in a WARNING."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gym_server.api.front import Front
from gym_server.core.looplag import LoopLagMonitor

STALL_S = 0.4


class Transcript:
    """Stands for what a stalled request holds (a batch of records, a body): weakly referenceable."""


held: list[weakref.ref[Transcript]] = []


def write(transcript: Transcript) -> None:
    held.append(weakref.ref(transcript))
    time.sleep(STALL_S)  # the defect the monitor exists to catch: blocking work on the loop


async def stall(request: object) -> PlainTextResponse:
    write(Transcript())  # the transcript: a local of the stack the watchdog samples
    return PlainTextResponse("done")


async def test_a_stall_is_exported_and_names_the_request_in_flight(caplog: pytest.LogCaptureFixture) -> None:
    monitor = LoopLagMonitor(warn_s=0.1, interval_s=0.02)
    registry = CollectorRegistry()
    registry.register(monitor)
    app = Starlette(routes=[Route("/slow/{name}", stall)])
    wrapped = Front([], app, monitor)  # the front keeps the table of requests in flight
    monitor.start()
    await asyncio.sleep(0.05)  # the monitor is waiting on its timer when the stall begins
    try:
        with caplog.at_level(logging.WARNING, logger="gym_server.core.looplag"):
            transport = httpx.ASGITransport(app=wrapped)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                assert (await client.get("/slow/abc")).text == "done"
                # The monitor's first wake-up after the stall reports it.
                for _ in range(100):
                    if monitor.max_s >= STALL_S - 0.02:
                        break
                    await asyncio.sleep(0.05)
    finally:
        await monitor.stop()
    # The timer due during the stall ran at least STALL_S minus one interval late (a lower bound only).
    assert monitor.max_s >= STALL_S - 0.02
    text = generate_latest(registry).decode()
    assert "gym_event_loop_lag_seconds_bucket" in text and "gym_event_loop_lag_max_seconds" in text
    count = next(line for line in text.splitlines() if line.startswith("gym_event_loop_lag_seconds_count"))
    assert float(count.split()[-1]) >= 1
    warnings = [
        record.getMessage() for record in caplog.records if "event loop blocked" in record.getMessage()
    ]
    assert warnings, caplog.text
    assert "GET /slow/abc" in warnings[0]
    assert "test_looplag.py" in warnings[0] and "stall" in warnings[0]  # the watchdog's stack sample
    assert "... front.py:" in warnings[0]  # and the innermost of the gym's own frames, below the four shown


async def test_the_sampled_stack_is_not_kept_alive(caplog: pytest.LogCaptureFixture) -> None:
    """The watchdog keeps names and line numbers of the stack it sampled, not its frames: a frame kept
    until the next stall kept every local of the stalled request (a batch of 1 MB transcripts in
    `tests/e2e/test_memory_release.py`) alive after it ended."""
    monitor = LoopLagMonitor(warn_s=0.1, interval_s=0.02)
    app = Front([], Starlette(routes=[Route("/slow/{name}", stall)]), monitor)
    held.clear()
    monitor.start()
    await asyncio.sleep(0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="gym_server.core.looplag"):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                assert (await client.get("/slow/abc")).text == "done"
                for _ in range(100):  # until the stall is reported: the watchdog sampled it
                    if "event loop blocked" in caplog.text:
                        break
                    await asyncio.sleep(0.05)
            assert "test_looplag.py" in caplog.text, caplog.text
            # No collection first: it may stall the loop long enough for a new sample, which let go of
            # the old stack before this fix too. Nothing here makes a cycle: freed means unreferenced.
            assert [ref() for ref in held] == [None]  # checked while the watchdog still runs
    finally:
        await monitor.stop()


async def test_no_request_in_flight_after_it_ends() -> None:
    monitor = LoopLagMonitor()
    app = Starlette(routes=[Route("/ok", lambda request: PlainTextResponse("ok"))])
    transport = httpx.ASGITransport(app=Front([], app, monitor))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        await client.get("/ok")
        await client.get("/missing")
    assert monitor._in_flight == {}
