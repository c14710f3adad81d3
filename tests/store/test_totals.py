"""The running totals of revision 0004 always equal a GROUP BY over the trajectories, on SQLite and
PostgreSQL: after creates, snapshots and closes through the real writer, re-scores, `mark_lost`, a moved
key, deletes and TRUNCATE; an upgrade backfills them from the rows already stored; and the inspector's
per-task means read from them match the ones grouped from the rows, tenant by tenant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, and_, case, delete, func, insert, select, text, update
from sqlalchemy.orm import Session
from store.conftest import RecordFactory, throwaway_postgres

from gym_server.store import inspector
from gym_server.store.inspector import SUCCESS_REWARD
from gym_server.store.migrate import MIGRATIONS_DIR, make_engine, upgrade_database
from gym_server.store.models import PolicyModel, trajectories_table, trajectory_totals_table
from gym_server.store.records import TrajectoryStatus
from gym_server.store.repository import TrajectoryFilter, mark_lost, record_to_row
from gym_server.store.writer import TrajectoryStore

Key = tuple[str, str, str, str, str]
Counts = tuple[int, int, float, int, int]


def _grouped(session: Session) -> dict[Key, Counts]:
    """The totals as a GROUP BY over the trajectories computes them."""
    rows = trajectories_table.c
    key = [
        func.coalesce(rows.run, ""),
        func.coalesce(PolicyModel(rows.policy), ""),
        rows.env,
        rows.task_id,
        rows.tenant,
    ]
    success = case((and_(rows.reward >= SUCCESS_REWARD, rows.failure.is_(None)), 1), else_=0)
    statement = select(
        *key,
        func.count(),
        func.count(rows.reward),
        func.coalesce(func.sum(rows.reward), 0.0),
        func.sum(success),
        func.count(rows.failure),
    ).group_by(*key)
    return {tuple(row[:5]): _counts(row[5:]) for row in session.execute(statement)}


def _kept(session: Session) -> dict[Key, Counts]:
    """The totals the triggers kept; a key with no episode left must hold nothing at all."""
    kept = {}
    for row in session.execute(select(trajectory_totals_table)):
        values = row._asdict()
        key = tuple(values[name] for name in ("run", "policy_model", "env", "task_id", "tenant"))
        counts = _counts(
            [values[name] for name in ("episodes", "rewarded", "reward_sum", "successes", "failures")]
        )
        if counts[0] == 0:
            assert counts == pytest.approx((0, 0, 0.0, 0, 0)), key
        else:
            kept[key] = counts
    return kept


def _counts(values: Any) -> Counts:
    episodes, rewarded, reward_sum, successes, failures = values
    return int(episodes), int(rewarded), round(float(reward_sum), 9), int(successes), int(failures)


def _assert_totals_match(engine: Engine) -> dict[Key, Counts]:
    with Session(engine) as session:
        grouped = _grouped(session)
        assert _kept(session) == grouped
        return grouped


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = make_engine(store_url)
    yield engine
    engine.dispose()


async def test_totals_follow_every_write_of_a_trajectory(
    store: TrajectoryStore, engine: Engine, make_record: RecordFactory
) -> None:
    policy = {"model": "tiny-a"}
    live = [make_record(run="r1", policy=policy, server_name="node-a") for _ in range(4)]
    for record in live:
        store.record(record)
    store.record(make_record(run=None, policy=None))  # no run, no policy model: counted under ''
    await store.flush()
    assert sum(counts[0] for counts in _assert_totals_match(engine).values()) == 5

    # Snapshots of live episodes: more turns, same (no) reward; then the close, each a new upsert of the row.
    for record in live:
        store.record(record.model_copy(update={"num_turns": 3}))
    await store.flush()
    _assert_totals_match(engine)
    closes = [(1.0, None), (0.5, None), (1.0, "sandbox_timeout"), (None, "verify_timeout")]
    for record, (reward, failure) in zip(live[:4], closes, strict=True):
        status = TrajectoryStatus.FAILED if failure else TrajectoryStatus.COMPLETED
        store.record(record.model_copy(update={"reward": reward, "failure": failure, "status": status}))
    await store.flush()
    grouped = _assert_totals_match(engine)
    assert grouped[("r1", "tiny-a", "math", "task-0", "default")] == (2, 1, 1.0, 1, 1)  # live[0], live[3]

    # The same close upserted again (a retry) counts once.
    store.record(live[0].model_copy(update={"reward": 1.0, "status": TrajectoryStatus.COMPLETED}))
    await store.flush()
    assert _assert_totals_match(engine) == grouped

    # A re-score replaces the current score: the totals follow the score the inspector shows.
    await store.add_rescore(live[1].id, reward=0.0, components={}, verifier_version="v2")
    await store.add_rescore(live[0].id, reward=None, components={}, verifier_version="v2")
    _assert_totals_match(engine)

    # The episode moves: another policy model, another run.
    store.record(live[2].model_copy(update={"policy": {"model": "tiny-b"}, "run": "r2", "reward": 1.0}))
    await store.flush()
    assert ("r2", "tiny-b", "math", "task-2", "default") in _assert_totals_match(engine)

    store.record(make_record(run="r1", policy=policy, server_name="node-b", reward=1.0))
    await store.flush()
    with Session(engine) as session, session.begin():
        assert mark_lost(session, "node-b") == 1  # a failure class now: a failure, no longer a success
    _assert_totals_match(engine)

    with engine.begin() as connection:
        connection.execute(delete(trajectories_table).where(trajectories_table.c.id == live[0].id))
        connection.execute(update(trajectories_table).values(tenant="other"))
    _assert_totals_match(engine)
    with engine.begin() as connection:
        connection.execute(delete(trajectories_table))
    assert _assert_totals_match(engine) == {}


@pytest.mark.postgres
def test_truncate_empties_the_totals(private_postgres: str, make_record: RecordFactory) -> None:
    upgrade_database(private_postgres)
    engine = make_engine(private_postgres)
    try:
        with engine.begin() as connection:
            connection.execute(insert(trajectories_table).values(record_to_row(make_record())))
            connection.execute(text("TRUNCATE trajectories, rescores"))
        with Session(engine) as session:
            assert session.execute(select(func.count()).select_from(trajectory_totals_table)).scalar() == 0
    finally:
        engine.dispose()


def _upgrade(engine: Engine, revision: str, *, down: bool = False) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    with throwaway_postgres() as url:
        yield url


def test_the_upgrade_backfills_the_totals_of_stored_rows(new_url: str, make_record: RecordFactory) -> None:
    engine = make_engine(new_url)
    try:
        _upgrade(engine, "0003")
        rows = [
            make_record(run=f"r{n % 2}", policy={"model": f"m{n % 3}"}, reward=n / 4, tenant=f"t{n % 2}")
            for n in range(12)
        ]
        rows.append(make_record(failure="sandbox_timeout", policy={"weights": 1}))
        # Rows as revision 0003 holds them: without the columns later revisions add (0006's lineage).
        with engine.connect() as connection:
            known = set(connection.exec_driver_sql("SELECT * FROM trajectories WHERE 1 = 0").keys())
        stored = [{k: v for k, v in record_to_row(row).items() if k in known} for row in rows]
        with engine.begin() as connection:
            connection.execute(insert(trajectories_table), stored)
        upgrade_database(new_url)
        assert sum(counts[0] for counts in _assert_totals_match(engine).values()) == 13
        # Back down and up again: the triggers and the table go and come back whole.
        _upgrade(engine, "0003", down=True)
        with engine.begin() as connection:
            connection.execute(delete(trajectories_table).where(trajectories_table.c.reward.is_(None)))
        upgrade_database(new_url)
        assert sum(counts[0] for counts in _assert_totals_match(engine).values()) == 12
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "filters",
    [
        {"policy": "m1"},
        {"policy": "m1", "env": "math"},
        {"policy": "m2", "tenant": "t0"},
        {"policy": "m2", "tenant": "t1", "env": "math"},
        {"run": "r1", "tenant": "t1"},
        {"run": "r0", "task_id": "task-0"},
        {"tenant": "t9"},
    ],
)
def test_task_means_and_run_summaries_from_the_totals_match_the_rows(
    engine: Engine, make_record: RecordFactory, filters: dict[str, str]
) -> None:
    rows = [
        make_record(
            run=f"r{n % 2}" if n % 11 else None,
            env="math" if n % 5 else "code",
            policy={"model": f"m{n % 3}"},
            reward=None if n % 7 == 0 else (n % 4) / 4,
            failure="sandbox_timeout" if n % 9 == 0 else None,
            tenant=f"t{n % 2}",
        )
        for n in range(60)
    ]
    with engine.begin() as connection:
        connection.execute(insert(trajectories_table), [record_to_row(row) for row in rows])
    where = TrajectoryFilter(**filters)
    with Session(engine) as session:
        from_totals = inspector.task_rewards(session, where)
        # A date bound that keeps every row sends the same filter down the path grouping the rows.
        everything = where.model_copy(update={"created_from": rows[0].created_at})
        from_rows = inspector.task_rewards(session, everything)
    assert from_totals.keys() == from_rows.keys()
    for task_id, totals in from_totals.items():
        assert totals.count == from_rows[task_id].count
        assert totals.reward_mean == pytest.approx(from_rows[task_id].reward_mean)
    # Scoped as the filter says (a tenant's key sees its own tasks only), not a task more.
    assert set(from_totals) == {row.task_id for row in rows if _matches(row, where)}
    with Session(engine) as session:
        runs_from_totals = inspector.run_summaries(session, where)
        runs_from_rows = inspector.run_summaries(session, everything)
    assert runs_from_totals[1] == runs_from_rows[1]
    for summary, expected in zip(runs_from_totals[0], runs_from_rows[0], strict=True):
        assert summary.model_dump(exclude={"reward_mean", "success_rate"}) == expected.model_dump(
            exclude={"reward_mean", "success_rate"}
        )
        assert (summary.reward_mean, summary.success_rate) == pytest.approx(
            (expected.reward_mean, expected.success_rate)
        )


def _matches(record: Any, where: TrajectoryFilter) -> bool:
    model = (record.policy or {}).get("model")
    checks = {
        "run": record.run,
        "env": record.env,
        "task_id": record.task_id,
        "tenant": record.tenant,
        "policy": model,
    }
    return all(getattr(where, name) in (None, value) for name, value in checks.items())
