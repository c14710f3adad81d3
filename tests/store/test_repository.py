"""The repository functions on real SQLite and PostgreSQL: conversion, upsert, queries, lost, rescores."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from gym_server.core.errors import RolloutNotFound
from gym_server.store import repository
from gym_server.store.migrate import make_engine, upgrade_database
from gym_server.store.models import Rescore, Trajectory, trajectories_table
from gym_server.store.records import FailureClass, TrajectoryRecord, TrajectoryStatus

RecordFactory = Callable[..., TrajectoryRecord]


@pytest.fixture
def sessions(store_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(store_url)
    yield sessionmaker(engine)
    engine.dispose()


def test_table_columns_are_the_record_fields() -> None:
    assert [column.name for column in trajectories_table.c] == list(TrajectoryRecord.model_fields)


def test_models_repr() -> None:
    trajectory = Trajectory(id="t1", env="math", task_id="x", status="live", reward=None)
    rescore = Rescore(id=3, trajectory_id="t1", reward=1.0, previous_reward=0.0)
    assert repr(trajectory) == "Trajectory(id='t1', env='math', task_id='x', status='live', reward=None)"
    assert repr(rescore) == "Rescore(id=3, trajectory_id='t1', reward=1.0, previous_reward=0.0)"


def test_every_field_round_trips(sessions: sessionmaker[Session], full_record: TrajectoryRecord) -> None:
    with sessions.begin() as session:
        assert repository.upsert_trajectories(session, [full_record]) == 1
    with sessions() as session:
        stored = repository.get_trajectory(session, full_record.id)
    assert stored == full_record
    assert stored is not None
    assert stored.messages[1]["content"] == "a\u0000b and an emoji 🤖🧪"
    assert stored.created_at.tzinfo is not None
    assert stored.created_at.utcoffset() == full_record.created_at.utcoffset()


def test_defaults_round_trip(sessions: sessionmaker[Session], make_record: RecordFactory) -> None:
    record = make_record()
    with sessions.begin() as session:
        repository.upsert_trajectories(session, [record])
    with sessions() as session:
        assert repository.get_trajectory(session, record.id) == record
        assert repository.get_trajectory(session, "missing") is None


def test_naive_and_offset_timestamps_are_stored_as_utc(
    sessions: sessionmaker[Session], make_record: RecordFactory
) -> None:
    naive = make_record(created_at=datetime(2025, 5, 1, 12, 0))
    offset = make_record(created_at=datetime.fromisoformat("2025-05-01T14:00:00+02:00"))
    with sessions.begin() as session:
        repository.upsert_trajectories(session, [naive, offset])
    with sessions() as session:
        for record in (naive, offset):
            stored = repository.get_trajectory(session, record.id)
            assert stored is not None
            assert stored.created_at == datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
            assert stored.created_at.tzinfo == UTC


def test_upsert_overwrites_every_field(
    sessions: sessionmaker[Session], full_record: TrajectoryRecord, make_record: RecordFactory
) -> None:
    with sessions.begin() as session:
        repository.upsert_trajectories(session, [full_record])
    replacement = make_record(id=full_record.id, env="other", status=TrajectoryStatus.LIVE)
    assert (replacement.run, replacement.policy, replacement.messages) == (None, None, [])
    with sessions.begin() as session:
        repository.upsert_trajectories(session, [replacement, make_record()])
    with sessions() as session:
        assert repository.get_trajectory(session, full_record.id) == replacement
        assert repository.count_trajectories(session) == 2


def test_upsert_of_nothing(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        assert repository.upsert_trajectories(session, []) == 0


def test_list_filters_order_and_paging(sessions: sessionmaker[Session], make_record: RecordFactory) -> None:
    records = [
        make_record(run="r1" if n % 2 else "r2", status=TrajectoryStatus.COMPLETED if n < 6 else "live")
        for n in range(10)
    ]
    with sessions.begin() as session:
        repository.upsert_trajectories(session, records)
    newest_first = sorted(records, key=lambda record: record.created_at, reverse=True)
    with sessions() as session:
        assert repository.list_trajectories(session) == newest_first
        pages = [repository.list_trajectories(session, offset=offset, limit=3) for offset in range(0, 12, 3)]
        assert [len(page) for page in pages] == [3, 3, 3, 1]
        assert [record for page in pages for record in page] == newest_first
        run1 = repository.list_trajectories(session, run="r1")
        assert run1 == [record for record in newest_first if record.run == "r1"]
        combined = repository.list_trajectories(
            session, run="r1", task_id="task-1", status=TrajectoryStatus.COMPLETED
        )
        expected = [
            record
            for record in newest_first
            if record.run == "r1" and record.task_id == "task-1" and record.status == "completed"
        ]
        assert expected
        assert combined == expected
        assert repository.list_trajectories(session, env="nope") == []
        assert repository.count_trajectories(session) == 10
        assert repository.count_trajectories(session, run="r1") == 5
        assert repository.count_trajectories(session, status=TrajectoryStatus.LIVE) == 4
        assert repository.count_trajectories(session, env="math", task_id="task-0") == 4


def test_same_created_at_pages_without_overlap(
    sessions: sessionmaker[Session], make_record: RecordFactory
) -> None:
    moment = datetime(2025, 6, 1, tzinfo=UTC)
    records = [make_record(created_at=moment) for _ in range(7)]
    with sessions.begin() as session:
        repository.upsert_trajectories(session, records)
    with sessions() as session:
        seen = [
            r.id
            for offset in range(0, 7, 2)
            for r in repository.list_trajectories(session, offset=offset, limit=2)
        ]
    assert seen == sorted((record.id for record in records), reverse=True)


def test_mark_lost_of_replicas_touches_their_live_rows_only(
    sessions: sessionmaker[Session], make_record: RecordFactory
) -> None:
    """`serve --ray` starting again marks what its previous run's replicas (`<name>-<i>`) left live."""
    replicas = [make_record(server_name=f"gym:80-{index}") for index in (0, 1, 12)]
    others = [
        make_record(server_name="gym:80"),
        make_record(server_name="gym:8080-0"),
        make_record(server_name="gym%80-0"),
    ]
    with sessions.begin() as session:
        repository.upsert_trajectories(session, [*replicas, *others])
    with sessions.begin() as session:
        assert repository.mark_lost(session, "gym:80", replicas=True) == 3
    with sessions() as session:
        stored = {r.id: repository.get_trajectory(session, r.id) for r in [*replicas, *others]}
    statuses = {key: row.status for key, row in stored.items() if row is not None}
    assert [statuses[r.id] for r in replicas] == [TrajectoryStatus.LOST] * 3
    assert [statuses[r.id] for r in others] == [TrajectoryStatus.LIVE] * 3


def test_mark_lost_touches_only_live_rows_of_that_server(
    sessions: sessionmaker[Session], make_record: RecordFactory
) -> None:
    live_a = [make_record(server_name="a") for _ in range(3)]
    done_a = make_record(server_name="a", status=TrajectoryStatus.COMPLETED, reward=1.0)
    live_b = make_record(server_name="b")
    live_none = make_record()
    with sessions.begin() as session:
        repository.upsert_trajectories(session, [*live_a, done_a, live_b, live_none])
    before = datetime.now(UTC)
    with sessions.begin() as session:
        assert repository.mark_lost(session, "a") == 3
    with sessions.begin() as session:
        assert repository.mark_lost(session, "a") == 0
    with sessions() as session:
        for record in live_a:
            stored = repository.get_trajectory(session, record.id)
            assert stored is not None
            assert stored.status == TrajectoryStatus.LOST
            assert stored.failure == FailureClass.SERVER_RESTART
            assert stored.finished_at is not None
            assert stored.finished_at >= before.replace(microsecond=0)
            assert stored.model_dump(exclude={"status", "failure", "finished_at"}) == record.model_dump(
                exclude={"status", "failure", "finished_at"}
            )
        for record in (done_a, live_b, live_none):
            assert repository.get_trajectory(session, record.id) == record


def test_rescore_keeps_the_previous_score(
    sessions: sessionmaker[Session], make_record: RecordFactory
) -> None:
    record = make_record(reward=0.0, components={"answer": 0.0}, verifier_version="v1")
    with sessions.begin() as session:
        repository.upsert_trajectories(session, [record])
    with sessions.begin() as session:
        first = repository.add_rescore(
            session,
            record.id,
            reward=1.0,
            components={"answer": 1.0},
            verifier_version="v2",
            info={"why": "fixed"},
        )
    with sessions.begin() as session:
        repository.add_rescore(
            session, record.id, reward=None, components={}, verifier_version="v3", failure="x"
        )
    assert (first.reward, first.previous_reward, first.previous_verifier_version) == (1.0, 0.0, "v1")
    assert first.created_at.tzinfo is not None
    with sessions() as session:
        rescores = repository.list_rescores(session, record.id)
        stored = repository.get_trajectory(session, record.id)
    assert [r.id for r in rescores] == sorted(r.id for r in rescores)
    assert rescores[0] == first
    assert (rescores[1].previous_reward, rescores[1].previous_verifier_version) == (1.0, "v2")
    assert (rescores[1].failure, rescores[1].info) == ("x", {})
    assert stored is not None
    assert (stored.reward, stored.components, stored.verifier_version, stored.verify_info) == (
        None,
        {},
        "v3",
        {},
    )


def test_rescore_of_an_unknown_trajectory(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session, pytest.raises(RolloutNotFound):
        repository.add_rescore(session, "missing", reward=1.0, components={}, verifier_version=None)
    with sessions() as session:
        assert repository.list_rescores(session, "missing") == []


def test_the_sqlite_driver_upsert_stores_what_the_core_upsert_stores(
    tmp_path: Path, full_record: TrajectoryRecord
) -> None:
    """The writer's SQLite path skips SQLAlchemy's execution and, for a row already stored, first tries an
    update that leaves its identity columns alone: it must leave byte-for-byte the rows and totals the
    Core upsert leaves, also when a record moves its row to another run, env and tenant."""
    finished = full_record.model_copy(update={"status": TrajectoryStatus.COMPLETED, "reward": 0.5})
    moved = finished.model_copy(
        update={"run": "other-run", "env": "other-env", "tenant": "t2", "reward": 1.0}
    )
    fresh = full_record.model_copy(update={"id": "fresh"})
    stored: dict[str, list[list[tuple[object, ...]]]] = {}
    for name, write in (
        ("core", repository.upsert_trajectories),
        ("driver", repository.upsert_trajectories_sqlite),
    ):
        url = f"sqlite:///{tmp_path / name}.db"
        upgrade_database(url)
        engine = make_engine(url)
        snapshots = stored[name] = []
        with engine.connect() as connection:
            # an insert, the update of the same id, one that changes its identity, then a batch of both
            for batch in ([full_record], [finished], [moved], [fresh, finished]):
                write(connection, batch)
                connection.connection.driver_connection.commit()  # type: ignore[union-attr]
                connection.commit()
                with sqlite3.connect(tmp_path / f"{name}.db") as raw:
                    snapshots.append(raw.execute("SELECT * FROM trajectories ORDER BY id").fetchall())
                    snapshots.append(
                        raw.execute("SELECT * FROM trajectory_totals ORDER BY 1, 2, 3, 4, 5").fetchall()
                    )
        engine.dispose()
    assert stored["driver"] == stored["core"]
    after_move, totals_after_move = stored["driver"][4], stored["driver"][5]
    assert [(row[1], row[2], row[11]) for row in after_move] == [("other-run", "other-env", 1.0)]
    assert {(row[3], row[4], row[5]) for row in totals_after_move} == {
        (full_record.run or "", full_record.tenant, 0),  # the old key keeps its row, with no episode
        ("other-run", "t2", 1),
    }
