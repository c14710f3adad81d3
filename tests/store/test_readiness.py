"""`/readyz` follows the trajectory writer: while acknowledged data cannot be committed the server is not
ready, even when reads still work (a SQLite file locked by another writer, as in the `outage` fixture)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
from conftest import make_settings
from gymtest import apoll, assert_problem

from gym_server.app import create_app


async def test_not_ready_while_the_writer_cannot_commit(
    empty_url: str, outage: Callable[[str], AbstractContextManager[None]]
) -> None:
    url = f"{empty_url}?timeout=0.05" if empty_url.startswith("sqlite") else empty_url
    settings = make_settings(url, store={"url": url, "flush_interval_s": 0.02, "commit_timeout_s": 0.5})
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            assert (await client.get("/readyz")).status_code == 200
            with outage(url):
                created = await client.post(
                    "/v1/sessions", json={"env": "counter", "task_id": "counter-0000"}
                )
                # Not acknowledged: the row could not be committed in time (it stays queued), and the
                # session, whose id the client never got, is ended at once instead of holding its slot.
                assert_problem(created, 503, "no session was created")
                assert app.state.manager.live_count == 0
                not_ready = await apoll(
                    lambda: client.get("/readyz"), lambda response: response.status_code == 503
                )
                assert "writer" in not_ready.json()["checks"]
            await apoll(lambda: client.get("/readyz"), lambda response: response.status_code == 200)
            stored = await apoll(lambda: client.get("/v1/rollouts"), lambda r: r.json()["total"] == 1)
            item = stored.json()["items"][0]
            assert (item["status"], item["failure"]) == ("failed", "store_error")
