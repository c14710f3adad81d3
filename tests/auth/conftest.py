"""Keys made in the test's database (SQLite file or PostgreSQL) and an app with authentication on."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from gym_server.auth.keystore import create_key, revoke_key
from gym_server.store.migrate import make_engine, upgrade_database
from tests.conftest import AppHarness

REFRESH_S = 0.1


@dataclass
class KeyMaker:
    """Creates and revokes keys in one database, as `gym-server keys` does."""

    url: str

    def __post_init__(self) -> None:
        upgrade_database(self.url)

    def create(self, tenant: str, *scopes: str) -> str:
        engine = make_engine(self.url)
        try:
            return create_key(engine, tenant, list(scopes))[1]
        finally:
            engine.dispose()

    def revoke(self, key: str) -> None:
        engine = make_engine(self.url)
        try:
            assert revoke_key(engine, key.split("_")[1])
        finally:
            engine.dispose()


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


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
