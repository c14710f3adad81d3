"""The rollout inspector's reads: run aggregates, curves over time, keyset pages and per-task rewards.

Every statement here takes its WHERE from a `TrajectoryFilter` (`clauses()`), so whatever scopes the
filter (a tenant, a date range) scopes every page of the inspector alike. They are shaped for a store of
millions of rows: aggregates read the covering indexes of migration 0003 instead of the wide rows (whose
transcripts dominate the table), and trajectory lists page by keyset on `(created_at, id)`, so page 10,000
costs what page 1 does. Functions take a SQLAlchemy `Session` the caller owns, as `repository` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import ColumnElement, Float, Integer, Select, and_, case, cast, func, or_, select
from sqlalchemy.orm import Session

from gym_server.store.models import PolicyModel, trajectories_table, trajectory_totals_table
from gym_server.store.records import TrajectoryRecord
from gym_server.store.repository import TrajectoryFilter, row_to_record

__all__ = [
    "SUCCESS_REWARD",
    "Curves",
    "PageCursor",
    "RunSummary",
    "TaskPasses",
    "TaskReward",
    "TrajectoryRow",
    "TrajectorySort",
    "compare_choices",
    "curves",
    "find_trajectory",
    "forks_of",
    "run_summaries",
    "task_passes",
    "task_rewards",
    "trajectory_page",
]

# An episode succeeded when it scored full marks and nothing marked it untrustworthy (a failure class).
SUCCESS_REWARD = 1.0

_columns = trajectories_table.c


def _success() -> ColumnElement[Any]:
    return case((and_(_columns.reward >= SUCCESS_REWARD, _columns.failure.is_(None)), 1.0), else_=0.0)


class RunSummary(BaseModel):
    """One run's aggregates over the trajectories the filter keeps."""

    run: str
    count: int
    reward_mean: float | None
    success_rate: float
    failures: int
    first_at: datetime
    last_at: datetime


def run_summaries(
    session: Session, where: TrajectoryFilter, *, offset: int = 0, limit: int = 20
) -> tuple[list[RunSummary], int]:
    """A page of runs, most recently active first, and how many runs match in all.

    Two statements (the caller's one transaction): the page's runs with their first and last episode,
    which reads only `(run, created_at)` from the covering index, then the counts of those runs alone:
    from the running totals when they answer the filter (`_totals_answer`), else from the trajectories.
    Aggregating every run to show twenty cost twice as much on a store of a million rows.
    """
    scoped = [_columns.run.is_not(None), *where.clauses()]
    runs_total = func.count().over().label("runs_total")
    last_at = func.max(_columns.created_at)
    ranked = (
        select(
            _columns.run,
            runs_total,
            func.min(_columns.created_at).label("first_at"),
            last_at.label("last_at"),
        )
        .where(*scoped)
        .group_by(_columns.run)
        .order_by(last_at.desc(), _columns.run)
        .offset(offset)
        .limit(limit)
    )
    page = session.execute(ranked).all()
    if not page:
        distinct = select(func.count(func.distinct(_columns.run))).where(*scoped)
        return [], session.execute(distinct).scalar_one() if offset else 0
    runs = [row.run for row in page]
    counts = _run_counts_from_totals if _totals_answer(where) else _run_counts_from_trajectories
    by_run = {row.run: row._asdict() for row in session.execute(counts(where, runs))}
    summaries = [
        RunSummary.model_validate(
            {**by_run[row.run], "first_at": _aware(row.first_at), "last_at": _aware(row.last_at)}
        )
        for row in page
    ]
    return summaries, page[0].runs_total


def _run_counts_from_totals(where: TrajectoryFilter, runs: list[str]) -> Select[Any]:
    totals = trajectory_totals_table.c
    episodes = func.sum(totals.episodes)
    return (
        select(
            totals.run,
            cast(episodes, Integer).label("count"),
            (_float(func.sum(totals.reward_sum)) / _float(func.nullif(func.sum(totals.rewarded), 0))).label(
                "reward_mean"
            ),
            (_float(func.sum(totals.successes)) / _float(episodes)).label("success_rate"),
            cast(func.sum(totals.failures), Integer).label("failures"),
        )
        .where(totals.run.in_(runs), *_totals_clauses(where))
        .group_by(totals.run)
    )


def _run_counts_from_trajectories(where: TrajectoryFilter, runs: list[str]) -> Select[Any]:
    return (
        select(
            _columns.run,
            func.count().label("count"),
            func.avg(_columns.reward).label("reward_mean"),
            func.avg(_success()).label("success_rate"),
            func.count(_columns.failure).label("failures"),
        )
        .where(_columns.run.in_(runs), *where.clauses())
        .group_by(_columns.run)
    )


@dataclass(frozen=True, slots=True)
class Curves:
    """Per-run curves over time buckets, and failure classes per bucket, ready for a chart.

    `times` are the buckets' start times (epoch seconds); `reward[run]` and `success[run]` hold one value
    or None (no episode of that run in the bucket) per bucket; `failures[class]` one count per bucket.
    """

    times: list[float]
    reward: dict[str, list[float | None]]
    success: dict[str, list[float | None]]
    failures: dict[str, list[int]]


def curves(session: Session, where: TrajectoryFilter, runs: list[str], *, buckets: int = 40) -> Curves:
    """Reward mean and success rate of each run in `runs` over time, and their failure classes."""
    if not runs:
        return Curves([], {}, {}, {})
    scoped = [_columns.run.in_(runs), *where.clauses()]
    epoch = _epoch_seconds(session)
    span = session.execute(select(func.min(epoch), func.max(epoch)).where(*scoped)).one()
    if span[0] is None:
        return Curves([], {run: [] for run in runs}, {run: [] for run in runs}, {})
    start, end = float(span[0]), float(span[1])
    # Slightly wider than span/buckets, so the newest episode falls in the last bucket, not one past it.
    width = (end - start) / (buckets - 0.001) if end > start else 1.0
    bucket = _floor(session, (epoch - start) / width)
    count = buckets if end > start else 1
    times = [start + index * width for index in range(count)]
    reward: dict[str, list[float | None]] = {run: [None] * count for run in runs}
    success: dict[str, list[float | None]] = {run: [None] * count for run in runs}
    by_run = (
        select(_columns.run, bucket.label("bucket"), func.avg(_columns.reward), func.avg(_success()))
        .where(*scoped)
        .group_by(_columns.run, bucket)
    )
    for run, index, mean, rate in session.execute(by_run):
        reward[run][int(index)] = None if mean is None else float(mean)
        success[run][int(index)] = float(rate)
    failures: dict[str, list[int]] = {}
    by_class = (
        select(_columns.failure, bucket.label("bucket"), func.count())
        .where(_columns.failure.is_not(None), *scoped)
        .group_by(_columns.failure, bucket)
    )
    for failure, index, number in session.execute(by_class):
        failures.setdefault(failure, [0] * count)[int(index)] = int(number)
    return Curves(times, reward, success, dict(sorted(failures.items())))


def _epoch_seconds(session: Session) -> ColumnElement[float]:
    """`created_at` as Unix seconds in the session's dialect (SQLite keeps text, Postgres a timestamptz)."""
    if session.get_bind().dialect.name == "sqlite":
        return cast((func.julianday(_columns.created_at) - 2440587.5) * 86400.0, Float)
    return cast(func.extract("epoch", _columns.created_at), Float)


def _floor(session: Session, value: ColumnElement[float]) -> ColumnElement[int]:
    """`value` rounded down: SQLite's CAST truncates (enough, as values are >= 0), Postgres's rounds."""
    if session.get_bind().dialect.name == "sqlite":
        return cast(value, Integer)
    return cast(func.floor(value), Integer)


def _aware(value: datetime | str) -> datetime:
    """An aggregate's timestamp as aware UTC: SQLite's MIN/MAX return the stored text, without the type."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class TrajectoryRow(BaseModel):
    """A trajectory as a list shows it: no transcript, no token data."""

    id: str
    run: str | None
    env: str
    env_version: str
    task_id: str
    status: str
    failure: str | None
    reward: float | None
    num_turns: int
    verifier_version: str | None
    created_at: datetime


# How a trajectory list is ordered: newest first (the default), or by reward, highest or lowest first
# (ties newest first; unscored trajectories last in both).
TrajectorySort = Literal["newest", "reward-desc", "reward-asc"]
# Unscored rows sort as these rewards, so they come last either way and the keyset stays a plain tuple.
_UNSCORED = {"reward-desc": -1e300, "reward-asc": 1e300}


class PageCursor(BaseModel):
    """Where a keyset page ends: the last row's `(created_at, id)`, and its sort key when the list is
    ordered by reward; the next page starts after it."""

    created_at: datetime
    id: str
    reward: float | None = None

    def token(self) -> str:
        moment = f"{self.created_at.isoformat()}|{self.id}"
        return moment if self.reward is None else f"r={self.reward!r}|{moment}"

    @classmethod
    def parse(cls, token: str) -> PageCursor:
        """The cursor `token()` wrote; raises ValueError on anything else."""
        reward = None
        if token.startswith("r="):
            key, _, token = token[2:].partition("|")
            try:
                reward = float(key)
            except ValueError:
                raise ValueError(f"a reward cursor starts 'r=<number>|', not {key!r}") from None
        moment, separator, trajectory_id = token.partition("|")
        if not separator or not trajectory_id:
            raise ValueError("a cursor is '<created_at ISO time>|<trajectory id>'")
        return cls(created_at=_aware(moment), id=trajectory_id, reward=reward)


_ROW_COLUMNS = [_columns[name] for name in TrajectoryRow.model_fields]


def trajectory_page(
    session: Session,
    where: TrajectoryFilter,
    *,
    after: PageCursor | None = None,
    limit: int = 50,
    sort: TrajectorySort = "newest",
) -> tuple[list[TrajectoryRow], PageCursor | None]:
    """One page of trajectories in `sort` order, after `after`; and the cursor of the next page, if any.

    Newest first pages on the `(created_at, id)` index. By reward, the filtered rows are ordered on
    `(reward, created_at, id)`, with no index on reward: meant for a run or an env, not a whole store.

    Raises:
        ValueError: `after` was written for another order.
    """
    statement = select(*_ROW_COLUMNS).where(*where.clauses())
    if sort == "newest":
        if after is not None and after.reward is not None:
            raise ValueError("this cursor pages a list sorted by reward; drop `after` or sort by reward")
        if after is not None:
            statement = statement.where(_older_than(after))
        order: list[Any] = [_columns.created_at.desc(), _columns.id.desc()]
    else:
        key = func.coalesce(_columns.reward, _UNSCORED[sort])
        if after is not None:
            if after.reward is None:
                raise ValueError("this cursor pages a list newest first; drop `after` or sort by date")
            beyond = key < after.reward if sort == "reward-desc" else key > after.reward
            statement = statement.where(or_(beyond, and_(key == after.reward, _older_than(after))))
        order = [
            key.desc() if sort == "reward-desc" else key.asc(),
            _columns.created_at.desc(),
            _columns.id.desc(),
        ]
    statement = statement.order_by(*order).limit(limit + 1)
    rows = [TrajectoryRow.model_validate(row._asdict()) for row in session.execute(statement)]
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    last = rows[-1]
    reward = None if sort == "newest" else (last.reward if last.reward is not None else _UNSCORED[sort])
    return rows, PageCursor(created_at=last.created_at, id=last.id, reward=reward)


def _older_than(after: PageCursor) -> ColumnElement[bool]:
    """Rows after `after` in newest-first order: created earlier, or at once with a smaller id."""
    return or_(
        _columns.created_at < after.created_at,
        and_(_columns.created_at == after.created_at, _columns.id < after.id),
    )


def compare_choices(
    session: Session, where: TrajectoryFilter, by: Literal["run", "policy"], *, limit: int = 500
) -> list[str]:
    """What one side of Compare can pick: the runs (or policy models) of the trajectories `where` keeps,
    most recently active first, at most `limit`. Reads `(run, created_at)` (or the policy index)."""
    name = _columns.run if by == "run" else PolicyModel(_columns.policy)
    last_at = func.max(_columns.created_at)
    statement = (
        select(name.label("name"))
        .where(name.is_not(None), name != "", *where.clauses())
        .group_by(name)
        .order_by(last_at.desc(), name)
        .limit(limit)
    )
    return [str(row.name) for row in session.execute(statement)]


def find_trajectory(session: Session, where: TrajectoryFilter, trajectory_id: str) -> TrajectoryRecord | None:
    """The stored trajectory with this id if `where` keeps it, else None (so a scoped reader sees a 404)."""
    statement = select(trajectories_table).where(_columns.id == trajectory_id, *where.clauses())
    row = session.execute(statement).first()
    return None if row is None else row_to_record(row)


def forks_of(
    session: Session, where: TrajectoryFilter, trajectory_id: str, limit: int = 64
) -> list[TrajectoryRecord]:
    """The stored forks of a trajectory that `where` keeps (index `ix_trajectories_parent_id`), by the
    turn they branch at, then oldest first; at most `limit` (a tree page shows that many columns)."""
    forks = where.model_copy(update={"parent_id": trajectory_id})
    statement = (
        select(trajectories_table)
        .where(*forks.clauses())
        .order_by(_columns.parent_turn, _columns.created_at, _columns.id)
        .limit(limit)
    )
    return [row_to_record(row) for row in session.execute(statement)]


class TaskReward(BaseModel):
    """A task's episodes under one side of a comparison: how many, and their mean reward."""

    task_id: str
    count: int
    reward_mean: float | None


def task_rewards(session: Session, where: TrajectoryFilter) -> dict[str, TaskReward]:
    """Mean reward per task over the trajectories `where` keeps, keyed by task id.

    A filter of run, env, task, tenant and policy alone (comparing two runs or two policies, with or
    without an env, keys on or off) reads the running totals of revision 0004: a few thousand rows where
    the trajectories are half a million. Any other filter (a version, a date range, a status) groups the
    trajectories themselves.
    """
    if _totals_answer(where):
        return _task_rewards_from_totals(session, where)
    return _task_rewards_from_trajectories(session, where)


class TaskPasses(BaseModel):
    """A task's scored episodes and its successes (full marks, no failure class), for a curriculum."""

    task_id: str
    scored: int
    successes: int


def task_passes(session: Session, where: TrajectoryFilter) -> dict[str, TaskPasses]:
    """Scored episodes and successes per task, read from the running totals, keyed by task id.

    Only tasks with a scored episode appear. `where` may name run, env, task, tenant and policy: the
    fields the totals are keyed by (a curriculum asks for one policy on one env, maybe one run).

    Raises:
        ValueError: `where` names a field the totals do not keep.
    """
    if not _totals_answer(where):
        raise ValueError(
            "pass counts are read from the running totals: filter by run, env, task, tenant, policy"
        )
    totals = trajectory_totals_table.c
    scored = func.sum(totals.rewarded)
    statement = (
        select(
            totals.task_id,
            cast(scored, Integer).label("scored"),
            cast(func.sum(totals.successes), Integer).label("successes"),
        )
        .where(*_totals_clauses(where))
        .group_by(totals.task_id)
        .having(scored > 0)
    )
    return {row.task_id: TaskPasses.model_validate(row._asdict()) for row in session.execute(statement)}


# The filter fields the totals are keyed by; a filter naming any other needs the trajectories.
_TOTALS_KEYED = {"run", "env", "task_id", "tenant", "policy"}


def _totals_answer(where: TrajectoryFilter) -> bool:
    named = {field for field, value in where if value is not None}
    # The totals file a trajectory without a run or policy model under '': such a filter means none.
    return named <= _TOTALS_KEYED and "" not in (where.run, where.policy)


def _totals_clauses(where: TrajectoryFilter) -> list[ColumnElement[bool]]:
    """`where` on the running totals; only for a filter `_totals_answer` accepts."""
    totals = trajectory_totals_table.c
    wanted = {
        totals.run: where.run,
        totals.env: where.env,
        totals.task_id: where.task_id,
        totals.tenant: where.tenant,
        totals.policy_model: where.policy,
    }
    return [column == value for column, value in wanted.items() if value is not None]


def _float(value: ColumnElement[Any]) -> ColumnElement[float]:
    """A sum as a float: Postgres sums integers as numeric, which does not divide by a float."""
    return cast(value, Float)


def _task_rewards_from_totals(session: Session, where: TrajectoryFilter) -> dict[str, TaskReward]:
    totals = trajectory_totals_table.c
    episodes = func.sum(totals.episodes)
    mean = _float(func.sum(totals.reward_sum)) / _float(func.nullif(func.sum(totals.rewarded), 0))
    statement = (
        select(totals.task_id, cast(episodes, Integer).label("count"), mean.label("reward_mean"))
        .where(*_totals_clauses(where))
        .group_by(totals.task_id)
        .having(episodes > 0)
    )
    return {row.task_id: TaskReward.model_validate(row._asdict()) for row in session.execute(statement)}


def _task_rewards_from_trajectories(session: Session, where: TrajectoryFilter) -> dict[str, TaskReward]:
    """Grouped by `coalesce(task_id, '')` (the same value: the column is never null) rather than the bare
    column: given statistics, SQLite otherwise walks the one-column task index to skip a sort, and with a
    filter that matches half the store (a policy) reads every row whole, 3.3 s instead of 0.6 s on a
    million rows. The expression lets the filter's own index drive the read.
    """
    task = func.coalesce(_columns.task_id, "")
    statement = (
        select(
            task.label("task_id"), func.count().label("count"), func.avg(_columns.reward).label("reward_mean")
        )
        .where(*where.clauses())
        .group_by(task)
    )
    return {row.task_id: TaskReward.model_validate(row._asdict()) for row in session.execute(statement)}
