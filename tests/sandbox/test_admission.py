"""The admission gate on its own: arrival order, bounded waits, give-ups, host-derived defaults."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from gymtest import apoll

from gym_server.core.errors import SandboxesBusy, SandboxUnavailable
from gym_server.core.settings import SandboxSettings
from gym_server.sandbox.admission import Admission, Budget, host_resources, queueing
from gym_server.sandbox.protocol import Limits

SMALL, LARGE = Limits(memory_mb=100), Limits(memory_mb=300)


def gate(**budget: float) -> Admission:
    values = {"max_running": 10, "memory_mb": 400, "cpus": 10.0, **budget}
    return Admission(
        Budget(int(values["max_running"]), int(values["memory_mb"]), values["cpus"]),
        queue_wait_s=60,
        retry_after_s=3,
    )


async def waiting_for(admission: Admission, count: int) -> None:
    async def state() -> dict[str, Any]:
        return admission.state()

    await apoll(state, lambda now: now["waiting"] >= count)


async def test_queued_callers_are_admitted_in_arrival_order_and_a_large_one_is_not_overtaken() -> None:
    admission = gate()
    held = await admission.admit(LARGE)
    order: list[str] = []

    async def one(name: str, limits: Limits) -> None:
        ticket = await admission.admit(limits, queue=True)
        order.append(name)
        ticket.release()

    large = asyncio.ensure_future(one("large", LARGE))
    await waiting_for(admission, 1)
    small = asyncio.ensure_future(one("small", SMALL))  # fits now, but would overtake the large one
    await waiting_for(admission, 2)
    assert order == []
    held.release()
    await asyncio.gather(large, small)
    assert order == ["large", "small"]
    assert admission.state() | {"peak": 0} == gate().state()  # everything given back


async def test_without_queueing_or_past_the_wait_the_refusal_is_a_429_with_retry_after() -> None:
    admission = gate(max_running=1)
    held = await admission.admit(SMALL)
    with pytest.raises(SandboxesBusy) as refused:
        await admission.admit(SMALL)  # a session: no queueing unless the context says so
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "3"}
    admission.queue_wait_s = 0.05
    with queueing(), pytest.raises(SandboxesBusy, match=r"after waiting 0\.05 s"):
        await admission.admit(SMALL)
    assert admission.state()["waiting"] == 0
    held.release()
    held.release()  # idempotent
    assert admission.state()["running"] == 0


async def test_a_caller_that_gives_up_leaves_no_reservation_and_does_not_block_the_queue() -> None:
    admission = gate(memory_mb=300)
    held = await admission.admit(LARGE)
    gives_up = asyncio.ensure_future(admission.admit(LARGE, queue=True))
    await waiting_for(admission, 1)
    behind = asyncio.ensure_future(admission.admit(SMALL, queue=True))
    await waiting_for(admission, 2)
    gives_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gives_up
    held.release()
    (await behind).release()
    assert admission.state()["running"] == 0 and admission.state()["memory_mb"] == 0


async def test_a_sandbox_over_the_whole_budget_is_refused_at_once_as_unavailable() -> None:
    with pytest.raises(SandboxUnavailable, match="GYM_SANDBOX__MEMORY_BUDGET_MB"):
        await gate(memory_mb=200).admit(LARGE, queue=True)


def test_unset_limits_are_derived_from_the_host_and_set_ones_win() -> None:
    cores, memory_mb = host_resources()
    derived = Budget.from_settings(SandboxSettings())
    assert derived.max_running >= cores and derived.cpus >= cores
    assert 0 < derived.memory_mb < memory_mb
    chosen = Budget.from_settings(SandboxSettings(max_running=3, memory_budget_mb=700, cpu_budget=1.5))
    assert chosen == Budget(3, 700, 1.5)
