"""The trainer's `GymClient` with `api_key`: it plays an episode on a server that requires keys, and
without one it gets the server's 401 as a `GymAPIError` (not retried)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from authtest import KeyMaker

from gym_trainer.client import GymAPIError, GymClient


async def test_the_client_sends_its_key(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GYM_API_KEY", raising=False)  # the client's default key
    key = keys.create(tenant(), "episodes")
    async with secured() as gym:
        transport = httpx.ASGITransport(app=gym.app)
        async with GymClient("http://localhost", transport=transport, api_key=key) as client:
            session = await client.create_session("counter", task_id="counter-0000")
            await client.close(session.session_id)
        async with GymClient("http://localhost", transport=transport) as client:
            with pytest.raises(GymAPIError) as refused:
                await client.create_session("counter", task_id="counter-0000")
            assert refused.value.status == 401 and refused.value.slug == "unauthorized"
            assert client.retries == 0
