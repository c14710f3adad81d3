"""Reading and writing trajectories with a SQLAlchemy `Session` that the caller owns.

These functions never begin, commit or roll back: the caller decides the transaction (the writer thread
commits a whole batch at once, a read opens a short one). Conversion between a `TrajectoryRecord` and a
row happens here and nowhere else (`record_to_row`, `row_to_record`); the table's column names are the
record's field names, so the two stay in step by construction and a test checks they cover each other.

Upserts are one statement per batch (`INSERT .. ON CONFLICT (id) DO UPDATE`, on SQLite and Postgres alike)
and overwrite every column, so the last record written for an id is the whole truth about it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import ColumnElement, Connection, Dialect, Insert, Row, Select, and_, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gym_server.core.errors import RolloutNotFound
from gym_server.store.models import MetadataPurpose, PolicyModel, Rescore, Trajectory, trajectories_table
from gym_server.store.records import EVALUATION, FailureClass, TrajectoryRecord, TrajectoryStatus, utcnow

__all__ = [
    "RescoreRecord",
    "TrajectoryFilter",
    "add_rescore",
    "count_matching",
    "count_trajectories",
    "get_trajectory",
    "list_rescores",
    "list_trajectories",
    "mark_lost",
    "page_trajectories",
    "record_to_row",
    "row_to_record",
    "select_trajectories",
    "upsert_trajectories",
    "upsert_trajectories_sqlite",
]


class TrajectoryFilter(BaseModel):
    """Which stored trajectories a list, count, export or inspector page means; a None field does not filter.

    Every read that selects trajectories builds its WHERE from `clauses()`, so a field added here (a
    tenant, say) scopes all of them at once.
    """

    model_config = ConfigDict(frozen=True)

    run: str | None = None
    env: str | None = None
    task_id: str | None = None
    status: TrajectoryStatus | None = None
    tenant: str | None = None  # the request's tenant; None when authentication is off (every tenant)
    env_version: str | None = None
    verifier_version: str | None = None
    policy: str | None = Field(None, description="the policy's `model` name")
    parent_id: str | None = Field(None, description="forks of this episode (docs/fork.md)")
    created_from: datetime | None = Field(None, description="created at or after")
    created_to: datetime | None = Field(None, description="created before")
    min_version: int | None = Field(
        None, description="every call sampled at or after this policy version (`version_min` >= it)"
    )
    max_version: int | None = Field(
        None, description="every call sampled at or before this policy version (`version_max` <= it)"
    )
    evaluation: bool | None = Field(
        None,
        description=(
            "True: only evaluation episodes (`metadata.purpose` is `evaluation`); False: all but those"
        ),
    )

    def clauses(self) -> list[ColumnElement[bool]]:
        columns = trajectories_table.c
        wanted = {
            "run": self.run,
            "env": self.env,
            "task_id": self.task_id,
            "status": self.status,
            "tenant": self.tenant,
            "env_version": self.env_version,
            "verifier_version": self.verifier_version,
            "parent_id": self.parent_id,
        }
        clauses = [columns[key] == value for key, value in wanted.items() if value is not None]
        if self.policy is not None:
            clauses.append(PolicyModel(columns.policy) == self.policy)
        if self.min_version is not None:
            clauses.append(columns.version_min >= self.min_version)
        if self.max_version is not None:
            clauses.append(columns.version_max <= self.max_version)
        if self.created_from is not None:
            clauses.append(columns.created_at >= self.created_from)
        if self.created_to is not None:
            clauses.append(columns.created_at < self.created_to)
        if self.evaluation is not None:
            purpose = func.coalesce(MetadataPurpose(columns["metadata"]), "")  # unset is not evaluation
            clauses.append(purpose == EVALUATION if self.evaluation else purpose != EVALUATION)
        return clauses


class RescoreRecord(BaseModel):
    """One re-verification of a stored trajectory and the score it replaced."""

    id: int
    trajectory_id: str
    reward: float | None
    components: dict[str, float]
    info: dict[str, Any]
    failure: str | None
    verifier_version: str | None
    previous_reward: float | None
    previous_verifier_version: str | None
    created_at: datetime


# Stored as they are, not copied through pydantic (the writer's largest cost): the transcript is
# JSON-native by construction (the session manager serializes it with `jsontext.dumps` for its
# byte budget), and so are tool schemas and driver token data. The other fields keep `model_dump`, which
# turns a model nested in them (a verifier's info, say) into the dict the JSON column can store.
_STORED_AS_IS = ("messages", "tools", "turns")

# A name no column of the trajectories table has: the window count selected beside a page's rows.
_TOTAL_LABEL = "matching_total"


def record_to_row(record: TrajectoryRecord) -> dict[str, Any]:
    """The column values of `record`, keyed by column name; nested values are left to the JSON type."""
    row = record.model_dump(exclude=set(_STORED_AS_IS))
    for name in _STORED_AS_IS:
        row[name] = getattr(record, name)
    return row


def row_to_record(row: Row[Any]) -> TrajectoryRecord:
    """The record a row of `trajectories_table` (selected whole) stands for."""
    return TrajectoryRecord.model_validate(row._asdict())


def upsert_trajectories(bind: Session | Connection, records: Iterable[TrajectoryRecord]) -> int:
    """Insert each record, or overwrite every column of the row with its id; returns how many were sent.

    Ids must be unique within one call (the writer coalesces them before). `bind` is an ORM session or,
    as in the writer thread, a Core connection (no ORM bookkeeping around the one statement).
    """
    rows = [record_to_row(record) for record in records]
    if not rows:
        return 0
    dialect = bind.dialect if isinstance(bind, Connection) else bind.get_bind().dialect
    bind.execute(_upsert_statement(dialect.name), rows)
    return len(rows)


def upsert_trajectories_sqlite(connection: Connection, records: Iterable[TrajectoryRecord]) -> int:
    """`upsert_trajectories` on SQLite, through the driver's own cursor; the caller commits the driver's
    connection (`connection.connection.driver_connection`).

    The same bind processors as SQLAlchemy's (JSON through the engine's serializer, timestamps as it
    stores them), without an execution context per call: acknowledged creates and closes commit one row
    at a time when nothing groups them, and that context was a fifth of such a commit's CPU
    (docs/benchmarks.md). An existing row is first updated without its identity columns (`_IDENTITY`):
    SQLite rewrites the entries of every index whose columns an UPDATE sets, whatever their values, and a
    close then rewrote six indexes for nothing (a close's commit 193 -> 124 us of CPU). A row whose
    identity did change is left alone by that statement, which the row count shows, and the batch is
    upserted whole again.
    """
    statements = _sqlite_upserts(connection.dialect)
    rows = []
    for record in records:
        row = record_to_row(record)
        rows.append(
            [
                value if process is None else process(value)
                for name, process in statements.processors
                for value in (row[name],)
            ]
        )
    if rows:
        driver = connection.connection.driver_connection
        if driver.executemany(statements.keeping_identity, rows).rowcount < len(rows):  # type: ignore[union-attr]
            driver.executemany(statements.whole, rows)  # type: ignore[union-attr]
    return len(rows)


# The columns that say which episode a row is and that indexes hold: a session's records never change
# them, so the SQLite upsert of an existing row leaves their index entries alone (see above).
_IDENTITY = (
    "run",
    "env",
    "env_version",
    "task_id",
    "server_name",
    "tenant",
    "parent_id",
    "parent_turn",
    "created_at",
    "buffer_group",
)


@dataclass(frozen=True)
class _SqliteUpserts:
    keeping_identity: str  # updates an existing row only where its identity columns are unchanged
    whole: str  # updates every column
    processors: list[tuple[str, Callable[[Any], Any] | None]]  # each `?`'s column and bind processor


@functools.cache
def _sqlite_upserts(dialect: Dialect) -> _SqliteUpserts:
    """The SQLite upserts' SQL (`?` placeholders), compiled once for an engine's dialect (its JSON
    serializer is part of the processors); both take the same parameters in the same order."""
    whole = _upsert_statement("sqlite").compile(dialect=dialect)
    statement = sqlite.insert(trajectories_table)
    keeping = statement.on_conflict_do_update(
        index_elements=["id"],
        set_={
            column.name: statement.excluded[column.name]
            for column in trajectories_table.c
            if column.name != "id" and column.name not in _IDENTITY
        },
        where=and_(
            *(trajectories_table.c[name].is_not_distinct_from(statement.excluded[name]) for name in _IDENTITY)
        ),
    ).compile(dialect=dialect)
    names = whole.positiontup or []  # the same as `keeping`'s: one VALUES list, no parameter after it
    columns = trajectories_table.c
    return _SqliteUpserts(
        keeping.string, whole.string, [(name, columns[name].type.bind_processor(dialect)) for name in names]
    )


@functools.cache
def _upsert_statement(dialect: str) -> Insert:
    """The upsert of whole trajectory rows, built once per dialect.

    Building it (its `excluded` pseudo-table proxies every column) cost more CPU than the rest of a
    one-row commit, and acknowledged creates and closes commit small batches often.
    """
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(trajectories_table)
    updates = {
        column.name: statement.excluded[column.name] for column in trajectories_table.c if column.name != "id"
    }
    return statement.on_conflict_do_update(index_elements=["id"], set_=updates)


def select_trajectories(where: TrajectoryFilter) -> Select[Any]:
    """Whole rows matching `where`, newest first (id breaks ties, so pages never overlap)."""
    columns = trajectories_table.c
    return (
        select(trajectories_table)
        .where(*where.clauses())
        .order_by(columns.created_at.desc(), columns.id.desc())
    )


def get_trajectory(
    session: Session, trajectory_id: str, tenant: str | None = None
) -> TrajectoryRecord | None:
    """The stored record with this id, or None; also None when it belongs to a tenant other than `tenant`."""
    where = TrajectoryFilter(tenant=tenant).clauses()
    statement = select(trajectories_table).where(trajectories_table.c.id == trajectory_id, *where)
    row = session.execute(statement).first()
    return None if row is None else row_to_record(row)


def list_trajectories(
    session: Session,
    *,
    run: str | None = None,
    env: str | None = None,
    task_id: str | None = None,
    status: TrajectoryStatus | None = None,
    offset: int = 0,
    limit: int = 100,
) -> list[TrajectoryRecord]:
    """One page of stored records matching every given filter, newest first."""
    where = TrajectoryFilter(run=run, env=env, task_id=task_id, status=status)
    statement = select_trajectories(where).offset(offset).limit(limit)
    return [row_to_record(row) for row in session.execute(statement)]


def page_trajectories(
    session: Session, where: TrajectoryFilter, *, offset: int = 0, limit: int = 100
) -> tuple[list[TrajectoryRecord], int]:
    """One page of records matching `where`, newest first, and how many match in all.

    Both come from one statement (a window count beside the rows), so they always agree: a SELECT and a
    separate COUNT can straddle the writer's commit and answer "3 in all" beside an empty page. Only a
    page past the end has no row to carry the total; then it is counted on its own.
    """
    matching = func.count().over().label(_TOTAL_LABEL)
    statement = select_trajectories(where).add_columns(matching).offset(offset).limit(limit)
    records: list[TrajectoryRecord] = []
    total = 0
    for row in session.execute(statement):
        values = row._asdict()
        total = values.pop(_TOTAL_LABEL)
        records.append(TrajectoryRecord.model_validate(values))
    if not records and offset > 0:
        total = count_matching(session, where)
    return records, total


def count_trajectories(
    session: Session,
    *,
    run: str | None = None,
    env: str | None = None,
    task_id: str | None = None,
    status: TrajectoryStatus | None = None,
) -> int:
    """How many stored records match every given filter."""
    return count_matching(session, TrajectoryFilter(run=run, env=env, task_id=task_id, status=status))


def count_matching(session: Session, where: TrajectoryFilter) -> int:
    """How many stored records `where` matches."""
    statement = select(func.count()).select_from(trajectories_table).where(*where.clauses())
    return session.execute(statement).scalar_one()


def mark_lost(session: Session, server_name: str, *, replicas: bool = False) -> int:
    """Mark every live trajectory of `server_name` lost (its server restarted); returns how many.

    Call it at start-up before the server opens sessions, so only the previous process's rows match.
    With `replicas`, the rows of its replicas instead (`<server_name>-<i>`: `serve --workers` and
    `serve --ray` name them so), for an entry point whose replicas of a previous run are gone.
    """
    columns = trajectories_table.c
    owner = (
        columns.server_name.startswith(f"{server_name}-", autoescape=True)
        if replicas
        else columns.server_name == server_name
    )
    statement = (
        update(trajectories_table)
        .where(columns.status == TrajectoryStatus.LIVE.value, owner)
        .values(
            status=TrajectoryStatus.LOST.value,
            failure=FailureClass.SERVER_RESTART.value,
            finished_at=utcnow(),
        )
        .returning(columns.id)
    )
    return len(session.execute(statement).all())


def add_rescore(
    session: Session,
    trajectory_id: str,
    *,
    reward: float | None,
    components: dict[str, float],
    verifier_version: str | None,
    info: dict[str, Any] | None = None,
    failure: str | None = None,
) -> RescoreRecord:
    """Record a new score for a stored trajectory and make it the trajectory's current score.

    The rescore row keeps the reward and verifier version it replaced; the trajectory's reward, components,
    verifier version and verify info become the new ones.

    Raises:
        RolloutNotFound: no stored trajectory has this id.
    """
    trajectory = session.get(Trajectory, trajectory_id, with_for_update=True)
    if trajectory is None:
        raise RolloutNotFound(trajectory_id)
    rescore = Rescore(
        trajectory_id=trajectory_id,
        reward=reward,
        components=components,
        info=info or {},
        failure=failure,
        verifier_version=verifier_version,
        previous_reward=trajectory.reward,
        previous_verifier_version=trajectory.verifier_version,
        created_at=utcnow(),
    )
    trajectory.reward = reward
    trajectory.components = components
    trajectory.verifier_version = verifier_version
    trajectory.verify_info = info or {}
    session.add(rescore)
    session.flush()
    return _rescore_record(rescore)


def list_rescores(session: Session, trajectory_id: str) -> list[RescoreRecord]:
    """Every re-score of one trajectory, oldest first."""
    statement = select(Rescore).where(Rescore.trajectory_id == trajectory_id).order_by(Rescore.id)
    return [_rescore_record(rescore) for rescore in session.scalars(statement)]


def _rescore_record(rescore: Rescore) -> RescoreRecord:
    return RescoreRecord.model_validate(rescore, from_attributes=True)
