"""The event-loop lag monitor: a stall is measured, exported on /metrics and named in a WARNING."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gym_server.api.front import Front
from gym_server.core.looplag import LoopLagMonitor

STALL_S = 0.4


async def stall(request: object) -> PlainTextResponse:
    time.sleep(STALL_S)  # noqa: ASYNC251 - the defect the monitor exists to catch: blocking work on the loop
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


async def test_no_request_in_flight_after_it_ends() -> None:
    monitor = LoopLagMonitor()
    app = Starlette(routes=[Route("/ok", lambda request: PlainTextResponse("ok"))])
    transport = httpx.ASGITransport(app=Front([], app, monitor))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        await client.get("/ok")
        await client.get("/missing")
    assert monitor._in_flight == {}
