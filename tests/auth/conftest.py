"""Fixtures of the auth tests: a key maker on the test's database (SQLite file or PostgreSQL), fresh
tenant names, and an app with authentication on."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from authtest import REFRESH_S, KeyMaker
from conftest import AppHarness


@pytest.fixture
def keys(database_url: str) -> KeyMaker:
    return KeyMaker(database_url)


@pytest.fixture
def tenant() -> Callable[[], str]:
    """Fresh tenant names: the PostgreSQL database is shared by the whole run."""
    return lambda: f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def secured(app_factory: Callable[..., Any]) -> Callable[..., Any]:
    """An app with `auth.mode=on` (other auth settings merged in); use as an async context."""

    @asynccontextmanager
    async def factory(**auth: Any) -> AsyncIterator[AppHarness]:
        async with app_factory(auth={"mode": "on", "refresh_s": REFRESH_S, **auth}) as harness:
            yield harness

    return factory
