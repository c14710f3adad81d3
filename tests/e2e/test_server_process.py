"""A real `gym-server serve` process on loopback: an episode over TCP, and restarts that lose nothing.

Parametrized over SQLite and the PostgreSQL server. A crash (SIGKILL) leaves the session's `live` row,
which the next start marks `lost`; a graceful stop records live sessions as lost itself.
"""

from __future__ import annotations

import functools
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa
from conftest import POSTGRES_ADMIN, ServerProcess
from gymtest import call, poll, target_of

pytestmark = pytest.mark.slow


def play_counter(client: httpx.Client) -> dict[str, Any]:
    created = client.post(
        "/v1/sessions", json={"env": "counter", "task_id": "counter-0003", "seed": 5, "run": "e2e"}
    )
    assert created.status_code == 201, created.text
    sid = created.json()["session_id"]
    value = int(
        client.post(f"/v1/sessions/{sid}/step", json={"message": call("read")}).json()["messages"][0][
            "content"
        ]
    )
    target = target_of(created.json()["messages"])
    while value != target:
        amount = max(-10, min(10, target - value))
        reply = client.post(f"/v1/sessions/{sid}/step", json={"message": call("add", {"amount": amount})})
        value = int(reply.json()["messages"][0]["content"])
    done = client.post(f"/v1/sessions/{sid}/step", json={"message": call("submit")}).json()
    assert done["done"] and done["reward"] == 1.0
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    return dict(created.json())


def wait_status(
    client: httpx.Client, rollout_id: str, status: str, timeout_s: float = 15.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    body: Any = None
    while time.monotonic() < deadline:
        response = client.get(f"/v1/rollouts/{rollout_id}")
        if response.status_code == 200:
            body = response.json()
            if body["status"] == status:
                return dict(body)
        time.sleep(0.05)
    raise AssertionError(f"{rollout_id} never reached {status}: {body}")


def in_database(client: httpx.Client, run: str, rollout_id: str, status: str) -> None:
    """Wait until the database holds `rollout_id` with `status` (the PostgreSQL database is shared by
    tests, so the run may hold other rows)."""
    poll(
        lambda: client.get("/v1/rollouts", params={"run": run, "limit": 500}).json()["items"],
        lambda items: any((item["id"], item["status"]) == (rollout_id, status) for item in items),
    )


def test_episode_over_tcp_and_restart_after_crash(
    server_factory: Callable[..., ServerProcess], database_url: str
) -> None:
    server = server_factory(database_url)
    server.start()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        finished = play_counter(client)
        live_body = {"env": "counter", "task_id": "counter-0001", "run": "e2e-live"}
        live = client.post("/v1/sessions", json=live_body).json()
        client.post(f"/v1/sessions/{live['session_id']}/step", json={"message": call("read")})
        bad = client.post(
            f"/v1/sessions/{live['session_id']}/step",
            content=b"{oops",
            headers={"content-type": "application/json"},
        )
        assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
        # Before the crash, both rows must be in the database, not only in the writer's queue (which the
        # single-row route also answers from): the list reads the database alone.
        in_database(client, "e2e", finished["session_id"], "completed")
        in_database(client, "e2e-live", live["session_id"], "live")

    server.kill()  # SIGKILL: no shutdown hook runs
    server.start()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        lost = wait_status(client, live["session_id"], "lost")
        assert lost["failure"] == "server_restart"
        kept = wait_status(client, finished["session_id"], "completed")
        assert kept["reward"] == 1.0 and kept["run"] == "e2e"
        gone = client.post(f"/v1/sessions/{live['session_id']}/step", json={"message": call("read")})
        assert gone.status_code == 404
        assert client.get(f"/v1/sessions/{live['session_id']}").json()["status"] == "lost"


def test_graceful_stop_records_live_sessions_as_lost(
    server_factory: Callable[..., ServerProcess], database_url: str
) -> None:
    server = server_factory(database_url)
    server.start()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        live = client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0002"}).json()
        client.post(f"/v1/sessions/{live['session_id']}/step", json={"message": call("add", {"amount": 2})})
    output = server.stop()
    assert "1 live sessions recorded as lost" in output
    server.start()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        lost = wait_status(client, live["session_id"], "lost")
        assert lost["failure"] == "server_shutdown"
        assert lost["num_turns"] == 1
        assert lost["messages"][-1]["content"] != ""


def test_a_second_server_on_a_busy_port_touches_nothing_of_the_running_one(
    server_factory: Callable[..., ServerProcess], database_url: str
) -> None:
    """Same host:port means same server name; its start-up used to mark the running server's live
    sessions lost in the shared store before it failed to bind."""
    running = server_factory(database_url)
    running.start()
    with httpx.Client(base_url=running.url, timeout=10) as client:
        live = client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0002"}).json()
        sid = live["session_id"]
        assert client.post(f"/v1/sessions/{sid}/step", json={"message": call("read")}).status_code == 200

        second = subprocess.run(running.args, env=running.env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 1
        assert "cannot listen on 127.0.0.1" in second.stderr
        assert "Traceback" not in second.stderr + second.stdout

        engine = sa.create_engine(database_url)
        try:
            with engine.connect() as connection:
                status = connection.execute(
                    sa.text("SELECT status FROM trajectories WHERE id = :id"), {"id": sid}
                ).scalar_one()
        finally:
            engine.dispose()
        assert status == "live"
        assert client.post(f"/v1/sessions/{sid}/step", json={"message": call("read")}).status_code == 200
        assert client.delete(f"/v1/sessions/{sid}").status_code == 204
        assert client.get(f"/v1/rollouts/{sid}").json()["status"] == "abandoned"


def test_workers_run_replicas_on_consecutive_ports_sharing_one_database(
    server_factory: Callable[..., ServerProcess], postgres_url: str
) -> None:
    # One machine: the replicas share its sandbox cap (and budget) instead of each taking all of it.
    server = server_factory(postgres_url, GYM_SANDBOX__BACKEND="bubblewrap", GYM_SANDBOX__MAX_RUNNING="6")
    port = int(server.url.rsplit(":", 1)[1])
    server.args += ["--workers", "2"]
    server.start()
    second = f"http://127.0.0.1:{port + 1}"

    def second_ready() -> bool:
        try:
            return httpx.get(f"{second}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    poll(second_ready, bool)
    sessions = {}
    for url in (server.url, second):
        with httpx.Client(base_url=url, timeout=10) as client:
            assert client.get("/readyz").json()["sandbox"]["admission"]["max_running"] == 3
            body = {"env": "counter", "task_id": "counter-0004", "run": "replicas"}
            created = client.post("/v1/sessions", json=body)
            sessions[url] = created.json()["session_id"]
            assert client.delete(f"/v1/sessions/{sessions[url]}").status_code == 204
    with httpx.Client(base_url=server.url, timeout=10) as client:
        # A session is local to its replica, but every replica writes to the shared store.
        assert client.post(f"/v1/sessions/{sessions[second]}/verify").status_code == 404
        for session_id in sessions.values():
            wait_status(client, session_id, "abandoned")
        names = {client.get(f"/v1/rollouts/{sid}").json()["server_name"] for sid in sessions.values()}
    assert names == {f"e2e-{port}-0", f"e2e-{port}-1"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nobody has migrated: a SQLite file not yet created, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh' / 'gym.db'}"
        return
    name = f"gym_fresh_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_workers_on_a_fresh_database_all_start(
    server_factory: Callable[..., ServerProcess], fresh_database: str
) -> None:
    # Replicas racing one new schema: before the parent migrated first, one of them died with
    # "table alembic_version already exists" (SQLite) or a duplicate-table error.
    server = server_factory(fresh_database, GYM_SANDBOX__BACKEND="bubblewrap")
    port = int(server.url.rsplit(":", 1)[1])
    server.args += ["--workers", "2"]
    server.start(timeout_s=120)  # two replicas importing everything at once on a loaded machine

    def ready(url: str) -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    for index in range(2):
        poll(functools.partial(ready, f"http://127.0.0.1:{port + index}"), bool)
    assert server.process is not None and server.process.poll() is None
    with httpx.Client(base_url=f"http://127.0.0.1:{port + 1}", timeout=10) as client:
        created = client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0004"})
        assert created.status_code == 201, created.text
        assert client.delete(f"/v1/sessions/{created.json()['session_id']}").status_code == 204
    output = server.stop()
    assert "already exists" not in output, output
