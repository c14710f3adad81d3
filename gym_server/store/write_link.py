"""The store's write connections: the writer thread's, and the event loop's for SQLite files.

`WriteLink` is one Core connection kept open across batches instead of checking one out of the pool
(with its pre-ping `SELECT 1`) into an ORM session per batch: that bookkeeping cost about half the CPU
of a one-row commit. A connection that fails is dropped; the next batch opens (and pings) a fresh one.

`write_engine` is the engine of the writer thread's connection: on SQLite its statement journals stay in
memory (`PRAGMA temp_store=MEMORY`). A trajectory upsert fires the totals triggers, so SQLite keeps a
statement journal of the pages it changes, and a row with the schema's indexes changes more than the 64 KiB
that SQLite keeps in memory before it spills the journal to a temporary file: every one-row commit then
created, wrote and deleted a file (measured: a create's commit 263 -> 154 us of CPU, docs/benchmarks.md).
The writer's statements are one batch of rows; the reads, whose sorts may be large, keep their temporary
files on disk (their engine is `make_engine`'s).

`loop_engine` is the engine of the commits the event loop makes itself on a SQLite file (see
`TrajectoryStore.committed`): its connections never wait for SQLite's write lock (`busy_timeout` 0: a
lock held by another process fails at once, and the writer thread, which may wait, takes the rows) and
never checkpoint the WAL (the fsyncs of a checkpoint must not hold the loop; the writer thread runs
`checkpoint` instead).
"""

from __future__ import annotations

import contextlib
from typing import Any

from sqlalchemy import URL, Connection, Engine, event, make_url, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from gym_server.store import repository
from gym_server.store.migrate import make_engine
from gym_server.store.records import TrajectoryRecord

__all__ = ["WriteLink", "loop_engine", "write_engine"]


class WriteLink:
    """A writer's connection: opened on first use, kept across batches, dropped on any error."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._connection: Connection | None = None

    def upsert(self, records: list[TrajectoryRecord]) -> None:
        """Write `records` in one transaction and commit it; on any error roll back, drop the connection."""
        connection = self._connection
        if connection is None:
            connection = self._connection = self.engine.connect()
        try:
            if connection.dialect.name == "sqlite":
                _upsert_sqlite(connection, records)
            else:
                repository.upsert_trajectories(connection, records)
                connection.commit()
        except BaseException:
            self.close()
            raise

    def checkpoint(self) -> tuple[int, int]:
        """Copy the SQLite WAL's committed pages into the database file without waiting for anyone
        (`PASSIVE`): the loop's commits leave that to the writer thread. Returns the pages in the WAL and
        how many of them are copied. Errors drop the connection."""
        connection = self._connection
        if connection is None:
            connection = self._connection = self.engine.connect()
        try:
            _busy, total, copied = connection.execute(text("PRAGMA wal_checkpoint(PASSIVE)")).one()
            connection.commit()
            return int(total), int(copied)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(SQLAlchemyError):  # a dead connection: the pool discards it
                connection.close()


def _upsert_sqlite(connection: Connection, records: list[TrajectoryRecord]) -> None:
    """Upsert and commit through the driver; its errors raised as SQLAlchemy would have wrapped them, so
    the writer sorts outages (a locked file) from refused rows as it does on the Core path."""
    dbapi_error = connection.dialect.loaded_dbapi.Error
    try:
        repository.upsert_trajectories_sqlite(connection, records)
        connection.connection.driver_connection.commit()  # type: ignore[union-attr]
    except dbapi_error as exc:
        raise DBAPIError.instance(None, None, exc, dbapi_error) from exc


def _journals_in_memory(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA temp_store=MEMORY")
    finally:
        cursor.close()


def write_engine(url: str | URL) -> Engine:
    """The engine of a writer's connections: `make_engine`'s, with SQLite's statement journals in memory."""
    engine = make_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _journals_in_memory)
    return engine


def _no_wait_no_checkpoint(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.execute("PRAGMA wal_autocheckpoint=0")
    finally:
        cursor.close()


def loop_engine(url: str) -> Engine | None:
    """The engine for the event loop's own commits, or None when `url` is no SQLite file.

    PostgreSQL commits over the network (the loop would wait for the round trip) and an in-memory
    SQLite database is another database on every connection, so both commit in the writer thread only.
    """
    parsed = make_url(url)
    database = parsed.database or ""
    in_memory = database in ("", ":memory:") or parsed.query.get("mode") == "memory"
    if parsed.get_backend_name() != "sqlite" or in_memory:
        return None
    engine = write_engine(parsed)
    # After make_engine's own pragmas (listeners run in the order they were added): these win.
    event.listen(engine, "connect", _no_wait_no_checkpoint)
    return engine
