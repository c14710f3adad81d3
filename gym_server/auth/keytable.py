"""The server's in-memory copy of the active keys: checking a request's key costs no database round trip.

The whole table (a few rows per tenant) is reloaded every `auth.refresh_s` (default 1 s) by a background
task, off the event loop; a revoked key therefore stops working within one refresh interval plus one
query. When the database does not answer, the last copy stays in force and the failure is logged (its
class and first line, never a row).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gym_server.auth.keys import Principal, secret_matches, split_key
from gym_server.auth.keystore import StoredKey, load_active_keys
from gym_server.store.migrate import describe_error, make_engine

__all__ = ["KeyTable"]

log = logging.getLogger(__name__)

# Compared against when the id is unknown, so an unknown id costs the same hash and comparison as a
# wrong secret (64 hex digits, like a real hash; no secret hashes to it in practice).
_NO_HASH = "0" * 64


class KeyTable:
    """Active keys by id, refreshed in the background; `verify` answers from memory."""

    def __init__(self, database_url: str, refresh_s: float) -> None:
        self._url = database_url
        self._refresh_s = refresh_s
        self._keys: dict[str, StoredKey] = {}
        self._task: asyncio.Task[None] | None = None
        self._reloads = 0

    @property
    def reloads(self) -> int:
        """Reloads completed since start: a key revoked before reload N began is refused once it is done
        (the second reload after a revocation is the first sure to have started after it)."""
        return self._reloads

    def __repr__(self) -> str:
        return f"KeyTable(active={len(self._keys)}, refresh_s={self._refresh_s:g})"

    async def start(self) -> None:
        """Load the keys once (a failure here stops the server), then keep them fresh."""
        self._engine = make_engine(self._url)
        self._keys = await asyncio.to_thread(load_active_keys, self._engine)
        self._task = asyncio.create_task(self._refresh_forever(), name="api-key-refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._engine.dispose()

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                self._keys = await asyncio.to_thread(load_active_keys, self._engine)
                self._reloads += 1
            except Exception as exc:
                log.warning(
                    "API keys not reloaded, the previous copy stays in force: %s", describe_error(exc)
                )

    def verify(self, key: str) -> Principal | None:
        """The principal of an active key, else None (malformed, unknown, revoked or wrong secret)."""
        parts = split_key(key)
        if parts is None:
            return None
        key_id, secret = parts
        stored = self._keys.get(key_id)
        matches = secret_matches(secret, stored.secret_hash if stored is not None else _NO_HASH)
        if stored is None or not matches:
            return None
        return Principal(key_id=key_id, tenant=stored.tenant, scopes=stored.scopes)

    def principal(self, key_id: str) -> Principal | None:
        """The principal of an active key known by id (a /ui login holds the id, never the key)."""
        stored = self._keys.get(key_id)
        return (
            None if stored is None else Principal(key_id=key_id, tenant=stored.tenant, scopes=stored.scopes)
        )
