"""Helpers of the auth tests: keys made in a test database as `gym-server keys` makes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gymtest import apoll

from gym_server.auth.keystore import create_key, revoke_key
from gym_server.store.migrate import make_engine, upgrade_database

# The key table's reload period in these tests (`reloaded_twice` waits for two reloads).
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


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def reloaded_twice(app: Any) -> None:
    """Wait for the server's key table to finish two more reloads: the second is the first sure to have
    started after whatever the test just changed in the database (a counted wait, not a clock)."""
    table = app.state.auth_gate.keys
    target = table.reloads + 2
    await apoll(lambda: _reloads(table), lambda reloads: reloads >= target)


async def _reloads(table: Any) -> int:
    return int(table.reloads)
