"""Connecting to the trajectory database and bringing its schema to the newest Alembic revision.

Every engine of the store comes from `make_engine`, so every connection gets the same treatment: SQLite
files get their parent folder created and WAL journaling with a busy timeout (concurrent readers beside
the writer thread, and a locked file waits instead of failing at once); Postgres gets a connect timeout so a
dead server fails a readiness probe quickly instead of hanging it. JSON columns go through
`gym_server.core.jsontext`: orjson where it is exact, the standard library for integers beyond 64 bits, so a
value is stored as it was sent.

`is_outage` and `describe_error` sort and print database errors the same way everywhere: the writer keeps
rows queued on an outage but skips a row the database refuses, reads turn an outage into a 503, and no
message carries SQLAlchemy's statement dump (it would hold transcripts).

Migrations run programmatically (`upgrade_database`) against the `migrations/` folder shipped inside the
package: no `alembic.ini` is needed where the server runs. Replicas and separate `serve` processes may start
together against one new database, so the upgrade is serialized per database: on PostgreSQL by a
transaction-scoped advisory lock, on a SQLite file by an exclusive `flock` on a sibling `<file>.migrate-lock`
(never on the database file itself: closing any descriptor of that file would drop SQLite's own POSIX locks
held by the same process). The second one waits, then finds the schema at head and does nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Engine, create_engine, event, make_url, text
from sqlalchemy.exc import DataError, DBAPIError, DisconnectionError, IntegrityError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from gym_server.core import jsontext

__all__ = [
    "MIGRATIONS_DIR",
    "SUPPORTED_BACKENDS",
    "current_revision",
    "describe_error",
    "head_revision",
    "is_outage",
    "json_dumps",
    "make_engine",
    "mask_url",
    "refresh_statistics",
    "upgrade_database",
]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
SUPPORTED_BACKENDS = ("sqlite", "postgresql")
SQLITE_BUSY_TIMEOUT_S = 5.0
POSTGRES_CONNECT_TIMEOUT_S = 10
# Any constant works; it only has to be the same in every replica.
_PG_MIGRATION_LOCK = 0x67796D5F6462  # "gym_db"


def json_dumps(value: Any) -> str:
    """Serialize a JSON column value; any integer, NUL and non-ASCII survive, keys may be non-strings."""
    return jsontext.dumps(value).decode()


def is_outage(exc: BaseException) -> bool:
    """True when the database did not answer (retrying later may work); False when it refused the rows.

    Constraint and data errors blame the statement; every other driver error, a lost connection or an
    exhausted pool blames the database (a refused connection, a locked SQLite file, a full disk, a missing
    table).
    """
    if isinstance(exc, DataError | IntegrityError):
        return False
    return isinstance(exc, DBAPIError | DisconnectionError | PoolTimeout)


def describe_error(exc: BaseException) -> str:
    """The driver's error as one line, without SQLAlchemy's statement and parameters (they hold user data,
    and printing them may itself fail: a value nested too deep for the JSON writer is also too deep for
    `repr`, which once crashed the writer thread here)."""
    cause = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0] if lines else ''}"


def mask_url(url: str | URL) -> str:
    """The URL as it may be printed or logged: the password replaced by `***`."""
    return make_url(url).render_as_string(hide_password=True)


def _sqlite_pragmas(busy_timeout_ms: int, dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms:d}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_busy_timeout_s(url: URL) -> float:
    """`?timeout=` (seconds, as the sqlite3 module reads it) or the default."""
    value = url.query.get("timeout")
    if isinstance(value, tuple):
        value = value[-1]
    return float(value) if value else SQLITE_BUSY_TIMEOUT_S


def make_engine(url: str | URL, **kwargs: Any) -> Engine:
    """A synchronous engine for `url` with the store's per-backend connection settings.

    Args:
        url: a SQLite or PostgreSQL URL: `sqlite:///var/gym.db` (relative path) or `postgresql://user@host/db`.
        **kwargs: passed on to `sqlalchemy.create_engine` (pool sizes, `echo`).

    Raises:
        ValueError: the URL names another database; the upserts are written for these two.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise ValueError(f"unsupported database {backend!r} in {mask_url(parsed)}: use sqlite or postgresql")
    options: dict[str, Any] = {
        "json_serializer": json_dumps,
        "json_deserializer": jsontext.loads,
        "pool_pre_ping": True,
    }
    if backend == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
    elif backend == "postgresql":
        options["connect_args"] = {"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S}
    options.update(kwargs)
    engine = create_engine(parsed, **options)
    if backend == "sqlite":
        busy_ms = int(_sqlite_busy_timeout_s(parsed) * 1000)
        event.listen(engine, "connect", partial(_sqlite_pragmas, busy_ms))
    return engine


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    """The newest revision shipped with this version of the package."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships revision 0001
        raise RuntimeError(f"no Alembic revision found under {MIGRATIONS_DIR}")
    return head


def current_revision(url: str | URL) -> str | None:
    """The revision the database at `url` is at; None for a database never migrated."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def refresh_statistics(url: str | URL) -> None:
    """Give SQLite's query planner fresh statistics (`ANALYZE`); PostgreSQL's autovacuum keeps its own.

    Without them SQLite takes every equality on an indexed column as selective: with keys on, each read
    names its tenant, and the planner then chose the one-column tenant index (every row of a big tenant,
    read whole) over the inspector's covering indexes (tenant last): 0.6 s instead of 1 ms for a page of
    trajectories on a million rows. A full ANALYZE of that store took 0.9 s; the server runs it at start.
    """
    engine = make_engine(url)
    try:
        if engine.dialect.name == "sqlite":
            with engine.begin() as connection:
                connection.execute(text("ANALYZE"))
    finally:
        engine.dispose()


@contextlib.contextmanager
def _sqlite_migration_lock(url: URL) -> Iterator[None]:
    """Hold an exclusive lock beside the SQLite file `url` names (nothing for an in-memory database)."""
    database = url.database or ""
    if (
        url.get_backend_name() != "sqlite"
        or not database
        or database == ":memory:"
        or database.startswith("file:")
    ):
        yield
        return
    lock_path = Path(database).with_name(Path(database).name + ".migrate-lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)  # released when the file closes
        yield


def upgrade_database(url: str | URL, revision: str = "head") -> None:
    """Run `alembic upgrade <revision>` on the database at `url`; a no-op when it is already there.

    Safe to call from several processes at once on the same database: they migrate one after another
    (see the module docstring). Anything but head is for measuring what a revision costs
    (`benchmarks/ui.py --writer`).

    Raises:
        sqlalchemy.exc.OperationalError: the database cannot be reached.
    """
    config = _alembic_config()
    parsed = make_url(url)
    engine = make_engine(parsed)
    try:
        with _sqlite_migration_lock(parsed), engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                # Released at commit; a second replica waits here, then finds the schema at head.
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()
