"""Per-tenant quotas: live sessions, sandbox seconds and requests per second are answered 429
problem+json with `Retry-After`, count per tenant (another tenant is not held up), and recover once the
tenant is under its quota again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from authtest import KeyMaker, bearer
from gymtest import assert_problem

from gym_server.auth.errors import QuotaExceeded
from gym_server.auth.quotas import TenantQuotas
from gym_server.core.settings import QuotaSettings

SESSION = {"env": "counter", "task_id": "counter-0000", "seed": 0}


async def test_live_session_quota_refuses_then_recovers_after_a_close(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    busy, other = keys.create(tenant(), "episodes"), keys.create(tenant(), "episodes")
    async with secured(quotas={"live_sessions": 2}) as gym:
        client = gym.client
        opened = [await client.post("/v1/sessions", json=SESSION, headers=bearer(busy)) for _ in range(2)]
        assert [r.status_code for r in opened] == [201, 201]
        refused = await client.post("/v1/sessions", json=SESSION, headers=bearer(busy))
        assert_problem(refused, 429, "holds its maximum of 2 live sessions")
        assert int(refused.headers["retry-after"]) >= 1
        # Through a protocol facade too: the quota is the tenant's, not the route's.
        facade = await client.post(
            "/v1/environments/counter/openenv/reset", json={"task_id": "counter-0000"}, headers=bearer(busy)
        )
        assert facade.status_code == 429 and "retry-after" in facade.headers
        # Another tenant is not held up.
        assert (await client.post("/v1/sessions", json=SESSION, headers=bearer(other))).status_code == 201
        # Recovery: one close frees one place.
        first = opened[0].json()["session_id"]
        assert (await client.delete(f"/v1/sessions/{first}", headers=bearer(busy))).status_code == 204
        assert (await client.post("/v1/sessions", json=SESSION, headers=bearer(busy))).status_code == 201


async def test_request_rate_quota_refuses_then_recovers(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key, other = keys.create(tenant(), "read"), keys.create(tenant(), "read")
    async with secured(quotas={"requests_per_s": 2.0, "burst": 3}) as gym:
        statuses = [(await gym.client.get("/v1/rollouts", headers=bearer(key))).status_code for _ in range(3)]
        assert statuses == [200, 200, 200]  # the burst
        refused = await gym.client.get("/v1/rollouts", headers=bearer(key))
        assert_problem(refused, 429, "over 2 requests per second")
        assert refused.headers["retry-after"] == "1"
        assert (await gym.client.get("/v1/rollouts", headers=bearer(other))).status_code == 200
        await asyncio.sleep(1.0)  # Retry-After: two tokens are back
        assert (await gym.client.get("/v1/rollouts", headers=bearer(key))).status_code == 200


async def test_sandbox_seconds_quota_refuses_a_create_once_the_window_is_spent(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    key = keys.create(tenant(), "episodes")
    async with secured(quotas={"sandbox_seconds": 0.2, "window_s": 3600}) as gym:
        client = gym.client
        session_id = (await client.post("/v1/sessions", json=SESSION, headers=bearer(key))).json()[
            "session_id"
        ]
        await asyncio.sleep(0.3)
        await client.delete(f"/v1/sessions/{session_id}", headers=bearer(key))
        refused = await client.post("/v1/sessions", json=SESSION, headers=bearer(key))
        assert_problem(refused, 429, "sandbox seconds")
        assert 1 <= int(refused.headers["retry-after"]) <= 3600


class Clock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now


def test_sandbox_seconds_count_live_and_ended_sessions_and_reset_with_the_window() -> None:
    clock = Clock()
    quotas = TenantQuotas(QuotaSettings(sandbox_seconds=60, window_s=100), retry_after_s=2, clock=clock)
    quotas.reserve_session("a")
    quotas.opened("a", "s1")
    clock.now += 30
    quotas.reserve_session("a")  # 30 s used: admitted
    quotas.opened("a", "s2")
    clock.now += 20  # s1 50 s, s2 20 s
    assert quotas.sandbox_seconds("a") == pytest.approx(70)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.reserve_session("a")
    assert refused.value.retry_after_s == 50  # the window began at 10 000 and ends at 10 100
    quotas.reserve_session("b")  # another tenant's books are its own
    quotas.ended("a", "s1")
    quotas.ended("a", "s2")
    clock.now += 50  # the next window: what was used before it no longer counts
    assert quotas.sandbox_seconds("a") == 0
    quotas.reserve_session("a")


def test_rate_quota_retry_after_says_when_a_token_is_back() -> None:
    clock = Clock()
    quotas = TenantQuotas(QuotaSettings(requests_per_s=0.25, burst=1), retry_after_s=2, clock=clock)
    quotas.take_request("a")
    with pytest.raises(QuotaExceeded) as refused:
        quotas.take_request("a")
    assert refused.value.retry_after_s == 4
    clock.now += 4
    quotas.take_request("a")
