"""Fixtures of the store tests: a real SQLite file and a real PostgreSQL database, records, a started store.

Every backend-dependent test runs on both (`store_url` is parametrized); the Postgres run is marked
`postgres`, so `-m "not postgres"` skips it on a machine without the server. Postgres databases are
created with random names and dropped afterwards, so concurrent runs never meet.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gym_server.store.migrate import upgrade_database
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.writer import TrajectoryStore

POSTGRES_ADMIN = os.environ.get("GYM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")

RecordFactory = Callable[..., TrajectoryRecord]


def admin_execute(sql: str) -> None:
    """Run one statement on the Postgres maintenance database, outside a transaction."""
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql)


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A new empty Postgres database, dropped (whoever is connected) on exit; yields its URL."""
    name = f"gym_store_test_{uuid.uuid4().hex[:12]}"
    try:
        admin_execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL at {POSTGRES_ADMIN} is needed for postgres tests (or use -m 'not postgres'): {exc}"
        )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_name(url: str) -> str:
    return url.rsplit("/", 1)[-1]


@pytest.fixture(scope="session")
def shared_postgres() -> Iterator[str]:
    """One migrated Postgres database for the whole run; tests empty it before use."""
    with throwaway_postgres() as url:
        upgrade_database(url)
        yield url


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database: a SQLite file in a folder not yet created, or the shared Postgres one."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'var' / 'gym.db'}"
        upgrade_database(url)
        return url
    url = str(request.getfixturevalue("shared_postgres"))
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as connection:
        connection.execute("TRUNCATE trajectories, rescores")
    return url


@pytest.fixture
def private_postgres() -> Iterator[str]:
    """An empty Postgres database of this test's own."""
    with throwaway_postgres() as url:
        yield url


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database nobody has migrated yet, on each backend; a private one, so tests may break it."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'var' / 'gym.db'}"
    return str(request.getfixturevalue("private_postgres"))


@contextmanager
def _outage(url: str) -> Iterator[None]:
    if url.startswith("sqlite"):
        holder = sqlite3.connect(url.removeprefix("sqlite:///").split("?")[0], isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    name = postgres_name(url)
    admin_execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    # With a timeout, pg_terminate_backend waits for each backend to exit (PostgreSQL 14+); without one
    # a pooled connection could still answer a probe right after this returns.
    admin_execute(f"SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = '{name}'")
    try:
        yield
    finally:
        admin_execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


@pytest.fixture
def outage() -> Callable[[str], AbstractContextManager[None]]:
    """`with outage(url):` takes the database down for real until the block ends.

    SQLite: another connection holds the file's write lock (`BEGIN EXCLUSIVE`), as a second writing process
    would; reads still work (WAL). Postgres: the database stops accepting connections and its sessions are
    terminated (`ALLOW_CONNECTIONS false`), as in a failover; use it on a private database (`empty_url`).
    """
    return _outage


@pytest.fixture
def make_record() -> RecordFactory:
    """Build records with distinct ids and strictly increasing `created_at` (1 s apart)."""
    counter = iter(range(1_000_000))
    epoch = datetime(2025, 1, 1, tzinfo=UTC)

    def factory(**fields: Any) -> TrajectoryRecord:
        n = next(counter)
        values: dict[str, Any] = {
            "id": f"traj-{n:05d}",
            "env": "math",
            "env_version": "v1",
            "task_id": f"task-{n % 3}",
            "created_at": epoch + timedelta(seconds=n),
        }
        values.update(fields)
        return TrajectoryRecord(**values)

    return factory


@pytest.fixture
def full_record() -> TrajectoryRecord:
    """A record with every field set, unicode, emoji and NUL bytes in its nested text."""
    return TrajectoryRecord(
        id="full-1",
        run="run-ü-1",
        env="tool_call",
        env_version="sha-1234abcd",
        task_id="tc/0007",
        seed=2**62 + 7,
        status=TrajectoryStatus.COMPLETED,
        failure="judge_failed",
        done_reason="the model said done ✅",
        messages=[
            {"role": "system", "content": "Sei gentile. 日本語も OK"},
            {"role": "user", "content": "a\u0000b and an emoji 🤖🧪"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "nul\\u0000 ✓"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c0", "content": "\u0000raw\u0000bytes\u0001"},
        ],
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
        reward=0.75,
        components={"format": 1.0, "answer": 0.5},
        verify_info={"judge": {"raw": "🤷", "tokens": [1, 2, 3]}, "note": None},
        verifier_version="judge@2",
        policy={
            "model": "smollm2-135m",
            "weight_version": 42,
            "sampling": {"temperature": 0.7, "top_p": 0.95},
        },
        turns=[
            {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5], "logprobs": [-0.125, -1.0e-9], "mask": [1, 1]}
        ],
        timings={"step_ms": [1.5, 2.25], "total_ms": 3.75},
        metadata={"tags": ["a", "b"], "nested": {"deep": {"x": 1}}},
        num_turns=2,
        server_name="node-a",
        created_at=datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC),
        finished_at=datetime(2025, 3, 4, 7, 6, 8, 654321, tzinfo=UTC),
    )


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[TrajectoryStore]:
    """A started store that writes only when flushed (a long batching window), stopped afterwards."""
    trajectory_store = TrajectoryStore(store_url, flush_interval_s=60.0, max_backoff_s=0.05)
    await trajectory_store.start()
    yield trajectory_store
    await trajectory_store.stop(drain_timeout_s=5.0)
