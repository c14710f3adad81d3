"""The SQLAlchemy tables behind the trajectory store: one row per episode, one per re-score.

`Trajectory` mirrors `gym_server.store.records.TrajectoryRecord` field for field, and its column names are
the record's field names, so `store.repository` converts between the two in one place. Project-wide type
choices live here once:

- nested fields (transcript, tools, components, token data, ...) are `sqlalchemy.JSON`, never Postgres
  `JSONB`, because JSONB rejects the `\\u0000` escape and a model can emit a NUL byte that the transcript
  must keep verbatim;
- timestamps are timezone-aware and always come back in UTC, on SQLite too (which stores no offset);
- status and failure class are plain strings, so a new enum member needs no migration.

The schema changes only through an Alembic revision under `store/migrations/versions`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    String,
    Table,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeEngine

from gym_server.store.records import DEFAULT_TENANT, NAME_MAX_CHARS

__all__ = [
    "ApiKey",
    "Base",
    "BufferGroup",
    "BufferLease",
    "MetadataPurpose",
    "PolicyModel",
    "PolicyRun",
    "PolicyVersion",
    "Rescore",
    "Trajectory",
    "TrajectoryTotals",
    "UTCDateTime",
    "api_keys_table",
    "buffer_groups_table",
    "rescores_table",
    "trajectories_table",
    "trajectory_totals_table",
]

JsonDict = dict[str, Any]
JsonList = list[dict[str, Any]]
ScoreDict = dict[str, float]


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware timestamp stored in UTC; naive values are taken as UTC.

    Postgres keeps the offset (`timestamptz`); SQLite keeps none, so values are written as naive UTC and
    given their zone back on read. Either way callers only ever see aware UTC datetimes.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Column shapes used more than once.
trajectory_id = Annotated[str, mapped_column(String(128))]
name = Annotated[str, mapped_column(String(NAME_MAX_CHARS))]
timestamp = Annotated[datetime, mapped_column(UTCDateTime())]


class Base(DeclarativeBase):
    """Declarative base of the store; maps the nested Python types of the record to portable JSON."""

    type_annotation_map: ClassVar[dict[Any, TypeEngine[Any]]] = {
        JsonDict: JSON(none_as_null=True),
        JsonList: JSON(none_as_null=True),
        ScoreDict: JSON(none_as_null=True),
        datetime: UTCDateTime(),
        str: String(255),
    }


class Trajectory(Base):
    """One episode, live or finished: the durable form of a `TrajectoryRecord`."""

    __tablename__ = "trajectories"
    # The rollout inspector's indexes (revision 0003), covering what its pages read so they never read the
    # wide rows (transcripts): runs, their curves and per-task means by run; keyset pages and run
    # aggregates by env; the version filters; the tenant last in each. The policy filter's index is below
    # the class.
    __table_args__ = (
        Index(
            "ix_trajectories_run_page", "run", "created_at", "id", "task_id", "reward", "failure", "tenant"
        ),
        Index("ix_trajectories_env_page", "env", "created_at", "id", "run", "reward", "failure", "tenant"),
        *(
            Index(
                f"ix_trajectories_{name}", name, "run", "created_at", "task_id", "reward", "failure", "tenant"
            )
            for name in ("env_version", "verifier_version")
        ),
        # Only the rollout buffer's episodes have an entry (revision 0007): no cost to any other row.
        Index(
            "ix_trajectories_buffer_group",
            "buffer_group",
            sqlite_where=text("buffer_group IS NOT NULL"),
            postgresql_where=text("buffer_group IS NOT NULL"),
        ),
    )

    id: Mapped[trajectory_id] = mapped_column(primary_key=True)
    # run and env have no index of their own: the page indexes above begin with them (revision 0005)
    run: Mapped[name | None]
    env: Mapped[name]
    env_version: Mapped[str] = mapped_column(String(128))
    task_id: Mapped[name] = mapped_column(index=True)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(32), index=True)
    failure: Mapped[str | None] = mapped_column(String(64))
    done_reason: Mapped[str | None] = mapped_column(Text)
    messages: Mapped[JsonList]
    tools: Mapped[JsonList]
    reward: Mapped[float | None]
    components: Mapped[ScoreDict]
    verify_info: Mapped[JsonDict]
    verifier_version: Mapped[str | None] = mapped_column(String(128))
    policy: Mapped[JsonDict | None]
    turns: Mapped[JsonList]
    timings: Mapped[JsonDict]
    # `metadata` is taken by DeclarativeBase; the column keeps the record's field name.
    metadata_: Mapped[JsonDict] = mapped_column("metadata")
    num_turns: Mapped[int]
    # the policy versions of its calls (`store.versions`); the rollout buffer reads them (revision 0007)
    version_min: Mapped[int | None] = mapped_column(BigInteger)
    version_max: Mapped[int | None] = mapped_column(BigInteger)
    # `metadata.buffer_group` as a column: a pull finds a group's episodes by its partial index (below)
    buffer_group: Mapped[name | None]
    server_name: Mapped[name | None] = mapped_column(index=True)
    tenant: Mapped[str] = mapped_column(String(64), index=True, server_default=DEFAULT_TENANT)
    # Lineage of a fork (revision 0006): the episode it was forked from and the turn; indexed to list an
    # episode's forks (the inspector's tree).
    parent_id: Mapped[str | None] = mapped_column(String(128), index=True)
    parent_turn: Mapped[int | None]
    created_at: Mapped[timestamp] = mapped_column(index=True)
    finished_at: Mapped[timestamp | None]

    def __repr__(self) -> str:
        return (
            f"Trajectory(id={self.id!r}, env={self.env!r}, task_id={self.task_id!r}, "
            f"status={self.status!r}, reward={self.reward!r})"
        )


class Rescore(Base):
    """One re-verification of a stored trajectory, keeping the score it replaced."""

    __tablename__ = "rescores"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    trajectory_id: Mapped[trajectory_id] = mapped_column(
        ForeignKey("trajectories.id", ondelete="CASCADE"), index=True
    )
    reward: Mapped[float | None]
    components: Mapped[ScoreDict]
    info: Mapped[JsonDict]
    failure: Mapped[str | None] = mapped_column(String(64))
    verifier_version: Mapped[str | None] = mapped_column(String(128))
    previous_reward: Mapped[float | None]
    previous_verifier_version: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[timestamp]

    def __repr__(self) -> str:
        return (
            f"Rescore(id={self.id!r}, trajectory_id={self.trajectory_id!r}, reward={self.reward!r}, "
            f"previous_reward={self.previous_reward!r})"
        )


class TrajectoryTotals(Base):
    """Running totals of the trajectories of one tenant, env, run, policy model and task (revision 0004).

    Kept by database triggers on `trajectories` (every insert, update of what they count, and delete, in
    the writing statement's own transaction), so the inspector compares half a million episodes by reading
    a few thousand rows. A trajectory without a run or a policy model counts under ''; a key whose
    episodes all went elsewhere stays with `episodes` 0.
    """

    __tablename__ = "trajectory_totals"
    # Clustered by the key on SQLite (no rowid): a policy's totals lie together, in task order, so
    # comparing policies reads one range of the table and groups it without sorting.
    __table_args__ = (Index("ix_trajectory_totals_run", "run", "task_id"), {"sqlite_with_rowid": False})

    policy_model: Mapped[name] = mapped_column(primary_key=True)
    task_id: Mapped[name] = mapped_column(primary_key=True)
    env: Mapped[name] = mapped_column(primary_key=True)
    run: Mapped[name] = mapped_column(primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    episodes: Mapped[int] = mapped_column(BigInteger)
    rewarded: Mapped[int] = mapped_column(BigInteger)  # episodes with a reward: the mean's denominator
    reward_sum: Mapped[float] = mapped_column(Float)
    successes: Mapped[int] = mapped_column(BigInteger)  # reward >= 1.0 without a failure class
    failures: Mapped[int] = mapped_column(BigInteger)  # with a failure class


class ApiKey(Base):
    """One API key: its public id, tenant and scopes, and a hash of its secret (never the secret)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[str] = mapped_column(String(64))  # comma-separated scope names
    secret_hash: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None]
    created_at: Mapped[timestamp]
    revoked_at: Mapped[timestamp | None]

    def __repr__(self) -> str:  # no hash: reprs end up in logs
        return f"ApiKey(id={self.id!r}, tenant={self.tenant!r}, scopes={self.scopes!r})"


class PolicyRun(Base):
    """A trainer's policy run (revision 0007): the version it last announced and how far the rollout
    buffer may run ahead of it (`sessions.policy_runs`, docs/rollout-buffer.md)."""

    __tablename__ = "policy_runs"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    run: Mapped[name] = mapped_column(primary_key=True)
    policy: Mapped[name | None]  # the policy's model name, for people reading the run
    version: Mapped[int] = mapped_column(BigInteger)  # the newest announced; never goes back
    first_version: Mapped[int] = mapped_column(BigInteger)  # the first announced: admission counts from it
    max_staleness: Mapped[int]  # k: no group whose oldest call is more than k versions behind is handed out
    groups_per_step: Mapped[int | None]  # groups a trainer step consumes; None: producers are not throttled
    created_at: Mapped[timestamp]
    updated_at: Mapped[timestamp]

    def __repr__(self) -> str:
        return f"PolicyRun(run={self.run!r}, version={self.version!r}, max_staleness={self.max_staleness!r})"


class PolicyVersion(Base):
    """One announcement of a policy run's version: when each version became the one being sampled."""

    __tablename__ = "policy_versions"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    run: Mapped[name] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    announced_at: Mapped[timestamp]


class BufferGroup(Base):
    """One group of episodes (a GRPO group: one task, `size` episodes) a producer was admitted to play
    for a policy run; its episodes carry its id in `metadata.buffer_group` (the trajectories' column
    `buffer_group`)."""

    __tablename__ = "buffer_groups"
    __table_args__ = (Index("ix_buffer_groups_run_state", "tenant", "run", "state", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    run: Mapped[name]
    env: Mapped[name | None]
    task_id: Mapped[name | None]
    size: Mapped[int]
    state: Mapped[str] = mapped_column(String(16))  # `store.buffer.GroupState`
    admitted_version: Mapped[int] = mapped_column(BigInteger)  # the run's version when it was admitted
    version_min: Mapped[int | None] = mapped_column(BigInteger)  # its episodes' oldest call, once ready
    version_max: Mapped[int | None] = mapped_column(BigInteger)
    lease_id: Mapped[str | None] = mapped_column(String(32), index=True)
    deliveries: Mapped[int]  # how many times it was handed out (more than 1: a lease expired unacknowledged)
    created_at: Mapped[timestamp]
    finished_at: Mapped[timestamp | None]  # consumed or marked stale

    def __repr__(self) -> str:
        return f"BufferGroup(id={self.id!r}, run={self.run!r}, state={self.state!r}, size={self.size!r})"


class BufferLease(Base):
    """One pull's hand-out: its groups are the trainer's until `expires_at`, for good once acknowledged."""

    __tablename__ = "buffer_leases"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    run: Mapped[name]
    version: Mapped[int] = mapped_column(BigInteger)  # the run's version when it was handed out
    groups: Mapped[int]  # how many groups it handed out
    created_at: Mapped[timestamp]
    expires_at: Mapped[timestamp]
    acknowledged_at: Mapped[timestamp | None]


# The Core tables, for bulk statements whose keys are column names (= the record's field names).
trajectories_table: Table = Base.metadata.tables["trajectories"]
rescores_table: Table = Base.metadata.tables["rescores"]
api_keys_table: Table = Base.metadata.tables["api_keys"]
trajectory_totals_table: Table = Base.metadata.tables["trajectory_totals"]
buffer_groups_table: Table = Base.metadata.tables["buffer_groups"]


class _JsonText(FunctionElement[str]):
    """One key of a JSON column as text (NULL when absent), the path written into the SQL as a literal:
    an expression index serves only queries that spell the same expression, and SQLAlchemy's
    `column["key"]` binds the path as a parameter, which neither SQLite nor Postgres matches to an index.
    Each subclass names its key (`json_key`); a class per key keeps SQLAlchemy's statement cache right."""

    type = String()
    inherit_cache = True
    json_key: ClassVar[str]


@compiles(_JsonText)
def _json_text_sqlite(element: _JsonText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_extract({compiler.process(element.clauses, **kw)}, '$.{element.json_key}')"


@compiles(_JsonText, "postgresql")
def _json_text_postgres(element: _JsonText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"({compiler.process(element.clauses, **kw)} ->> '{element.json_key}')"


class PolicyModel(_JsonText):
    """The `model` of a trajectory's policy, spelled as the expression index of revision 0003 is."""

    inherit_cache = True
    name = "policy_model"
    json_key = "model"


class MetadataPurpose(_JsonText):
    """The `purpose` of a trajectory's metadata (`records.PURPOSE_KEY`): evaluation episodes say so."""

    inherit_cache = True
    name = "metadata_purpose"
    json_key = "purpose"


# The policy filter's index (revision 0003), with the columns the inspector reads beside the policy; at
# module level, as it needs the column the class made.
_columns = trajectories_table.c
Index(
    "ix_trajectories_policy_model",
    PolicyModel(_columns.policy),
    *(_columns[name] for name in ("run", "created_at", "env", "task_id", "reward", "failure", "tenant")),
)
