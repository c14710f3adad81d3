"""A 2xx follows the commit of its row, never a refusal of it, on SQLite and PostgreSQL.

The database is made to refuse rows with a trigger (a fault of the store itself, whatever the content),
for the rows of one run only: every create, or every final (non-`live`) record. Before, a create whose row
was refused answered 503 yet left a live session holding its sandbox, and a close whose row was refused
answered 503 the first time and 204 the second, with nothing ever stored.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from gymtest import apoll, assert_problem, open_counter

from gym_server.store.migrate import make_engine


@contextmanager
def refusing(url: str, condition: str) -> Iterator[None]:
    """While inside, the database refuses (as a constraint violation) every trajectory row `condition` holds
    for; `condition` is SQL over `NEW`."""
    name = f"refuse_{uuid.uuid4().hex[:10]}"
    engine = make_engine(url)
    if engine.dialect.name == "sqlite":
        install = [
            f"CREATE TRIGGER {name}_{event} BEFORE {event} ON trajectories WHEN {condition} "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            for event in ("INSERT", "UPDATE")
        ]
        remove = [f"DROP TRIGGER {name}_{event}" for event in ("INSERT", "UPDATE")]
    else:
        refuse = "RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'check_violation'"
        install = [
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF {condition} THEN "
            f"{refuse}; END IF; RETURN NEW; END $$",
            f"CREATE TRIGGER {name} BEFORE INSERT OR UPDATE ON trajectories FOR EACH ROW "
            f"EXECUTE FUNCTION {name}()",
        ]
        remove = [f"DROP TRIGGER {name} ON trajectories", f"DROP FUNCTION {name}()"]
    try:
        with engine.begin() as connection:
            for statement in install:
                connection.execute(sa.text(statement))
        yield
    finally:
        with engine.begin() as connection:
            for statement in remove:
                connection.execute(sa.text(statement))
        engine.dispose()


def stored_status(url: str, session_id: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            query = sa.text("SELECT status FROM trajectories WHERE id = :id")
            return connection.execute(query, {"id": session_id}).scalar_one_or_none()
    finally:
        engine.dispose()


async def test_a_create_whose_row_is_refused_leaves_no_session(app_factory: Any) -> None:
    run = f"refused-{uuid.uuid4().hex[:8]}"
    async with app_factory() as gym:
        url = gym.settings.store.resolved_url()
        with refusing(url, f"NEW.run = '{run}'"):
            response = await gym.client.post(
                "/v1/sessions", json={"env": "counter", "task_id": "counter-0000", "run": run}
            )
            assert_problem(response, 503, "no session was created")
            assert response.json()["type"].endswith(":store-refused")
            assert gym.app.state.manager.live_count == 0
            await gym.app.state.store.flush()  # its final record (failed, store_error) is refused too
        # The store works again; nothing of the refused create was stored.
        await open_counter(gym.client, run=run)
        assert gym.app.state.manager.live_count == 1
        listed = (await gym.client.get("/v1/rollouts", params={"run": run})).json()
        assert [item["status"] for item in listed["items"]] == ["live"]


async def test_a_refused_create_gives_its_sandbox_back(app_factory: Any) -> None:
    run = f"refused-{uuid.uuid4().hex[:8]}"
    async with app_factory(sandbox={"backend": "bubblewrap", "max_running": 1}) as gym:
        with refusing(gym.settings.store.resolved_url(), f"NEW.run = '{run}'"):
            body = {"env": "python_repl", "task_id": "python_repl-0000", "run": run}
            for _ in range(2):  # the second would be a 429 if the first still held the only sandbox
                assert_problem(await gym.client.post("/v1/sessions", json=body), 503, "could not be stored")
            admission = (await gym.client.get("/readyz")).json()["sandbox"]["admission"]
            assert admission["running"] == 0
            assert gym.app.state.manager.live_count == 0


async def test_a_close_answers_204_only_once_its_row_is_stored(app_factory: Any) -> None:
    run = f"refused-{uuid.uuid4().hex[:8]}"
    async with app_factory() as gym:
        url = gym.settings.store.resolved_url()
        with refusing(url, f"NEW.run = '{run}' AND NEW.status <> 'live'"):
            session_id = (await open_counter(gym.client, run=run))["session_id"]
            for _ in range(3):  # every retry writes the row again, and is refused again
                closed = await gym.client.delete(f"/v1/sessions/{session_id}")
                assert_problem(closed, 503, "repeating the request writes it again")
                assert closed.json()["type"].endswith(":store-refused")
            assert stored_status(url, session_id) == "live"
            assert gym.app.state.store.refused == 1
        # The database takes rows again: the next close writes the final one, and only then says 204.
        assert (await gym.client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        assert stored_status(url, session_id) == "abandoned"
        assert gym.app.state.store.refused == 0


async def test_an_expired_session_whose_row_was_refused_is_not_confirmed_by_a_close(app_factory: Any) -> None:
    run = f"refused-{uuid.uuid4().hex[:8]}"
    async with app_factory() as gym:
        url = gym.settings.store.resolved_url()
        with refusing(url, f"NEW.run = '{run}' AND NEW.status <> 'live'"):
            session_id = (await open_counter(gym.client, run=run, ttl_s=0.05))["session_id"]
            # The reaper expires it and records it; nobody waits on that record, and the database refuses it.
            await apoll(lambda: asyncio.sleep(0, gym.app.state.store.refused), lambda refused: refused == 1)
            closed = await gym.client.delete(f"/v1/sessions/{session_id}")
            assert_problem(closed, 503, "refused")
            assert stored_status(url, session_id) == "live"
        assert (await gym.client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        assert stored_status(url, session_id) == "expired"
