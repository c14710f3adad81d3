"""A 2xx on a write means committed: a server SIGKILLed right after a burst of acknowledged closes has
every one of those episodes complete on disk, on SQLite and on PostgreSQL.

Before group commit the close handed its record to the batching writer and answered 204 at once; the
same burst then lost dozens of acknowledged episodes (no row, or a stale `live` snapshot). The server
runs with the default 0.2 s batching window, so the old behaviour fails this test every time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import httpx
import pytest
import sqlalchemy as sa
from conftest import ServerProcess
from gymtest import call

pytestmark = pytest.mark.slow

CLIENTS = 16
EPISODES_PER_CLIENT = 60  # 960 acknowledged episodes, the scale at which the loss was measured


async def _play(client: httpx.AsyncClient, run: str, acknowledged: list[str]) -> None:
    for _ in range(EPISODES_PER_CLIENT):
        created = await client.post(
            "/v1/sessions", json={"env": "counter", "task_id": "counter-0001", "run": run}
        )
        assert created.status_code == 201, created.text
        session_id = created.json()["session_id"]
        for message in (call("read"), call("add", {"amount": 1})):
            stepped = await client.post(f"/v1/sessions/{session_id}/step", json={"message": message})
            assert stepped.status_code == 200, stepped.text
        closed = await client.delete(f"/v1/sessions/{session_id}")
        assert closed.status_code == 204, closed.text
        acknowledged.append(session_id)


async def _burst(url: str, run: str) -> list[str]:
    acknowledged: list[str] = []
    limits = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        await asyncio.gather(*(_play(client, run, acknowledged) for _ in range(CLIENTS)))
    return acknowledged


def test_every_acknowledged_close_survives_sigkill(
    server_factory: Callable[..., ServerProcess], database_url: str
) -> None:
    server = server_factory(database_url, GYM_STORE__FLUSH_INTERVAL_S="0.2")
    server.start()
    run = f"durable-{uuid.uuid4().hex[:8]}"
    acknowledged = asyncio.run(_burst(server.url, run))
    server.kill()  # SIGKILL right after the last 204: no shutdown hook, no drain

    assert len(acknowledged) == CLIENTS * EPISODES_PER_CLIENT
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sa.text("SELECT id, status, num_turns, finished_at FROM trajectories WHERE run = :run"),
                {"run": run},
            ).all()
    finally:
        engine.dispose()
    stored = {row.id: row for row in rows}
    missing = [sid for sid in acknowledged if sid not in stored]
    incomplete = [
        (sid, stored[sid].status, stored[sid].num_turns)
        for sid in acknowledged
        if sid in stored
        and (
            stored[sid].status != "abandoned" or stored[sid].num_turns != 2 or stored[sid].finished_at is None
        )
    ]
    assert (missing, incomplete) == ([], []), f"{len(missing)} missing, {len(incomplete)} incomplete"
