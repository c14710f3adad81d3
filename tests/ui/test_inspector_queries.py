"""The inspector's store queries against the known store, on SQLite and PostgreSQL: the numbers the pages
show (counts, means, success, failures), curves, keyset pages, per-task comparison and every filter."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, Select, func, select, text
from sqlalchemy.orm import Session
from ui.inspector_data import SHOWCASE, populate

from gym_server.store import inspector
from gym_server.store.migrate import make_engine, refresh_statistics
from gym_server.store.models import trajectories_table
from gym_server.store.records import DEFAULT_TENANT
from gym_server.store.repository import TrajectoryFilter
from gym_server.ui.compare import compare_tasks


def _runs(session: Session, **filters: object) -> dict[str, inspector.RunSummary]:
    summaries, total = inspector.run_summaries(session, TrajectoryFilter(**filters))
    assert total == len(summaries)
    return {summary.run: summary for summary in summaries}


def test_run_summaries_count_mean_success_and_failures(populated_session: Session) -> None:
    runs = _runs(populated_session)
    assert list(runs) == ["improved", "baseline", "math-run"]  # most recently active first
    baseline, improved = runs["baseline"], runs["improved"]
    assert (baseline.count, baseline.failures) == (5, 1)
    assert baseline.reward_mean == pytest.approx(0.625)  # the failed episode has no reward
    assert baseline.success_rate == pytest.approx(2 / 5)
    assert (improved.count, improved.failures) == (4, 0)
    assert improved.reward_mean == pytest.approx(0.6875)
    assert improved.success_rate == pytest.approx(0.5)
    assert baseline.first_at == datetime(2026, 11, 20, 10, tzinfo=UTC)


def test_run_summaries_page_and_total(populated_session: Session) -> None:
    page, total = inspector.run_summaries(populated_session, TrajectoryFilter(), offset=1, limit=1)
    assert total == 3
    assert [summary.run for summary in page] == ["baseline"]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"env": "math"}, {"math-run"}),
        ({"policy": "tiny-b"}, {"improved"}),
        ({"verifier_version": "v1"}, {"baseline", "math-run"}),
        ({"env_version": "ev1"}, {"baseline", "improved", "math-run"}),
        ({"created_from": datetime(2026, 11, 15, tzinfo=UTC)}, {"baseline", "improved"}),
        ({"created_to": datetime(2026, 11, 21, tzinfo=UTC)}, {"baseline", "math-run"}),
        ({"env_version": "nope"}, set()),
    ],
)
def test_every_filter_narrows_the_runs(
    populated_session: Session, filters: dict[str, object], expected: set[str]
) -> None:
    assert set(_runs(populated_session, **filters)) == expected


def test_curves_hold_one_line_per_run_and_the_failure_classes(populated_session: Session) -> None:
    curves = inspector.curves(populated_session, TrajectoryFilter(), ["baseline", "improved"], buckets=4)
    assert len(curves.times) == 4
    assert set(curves.reward) == {"baseline", "improved"}
    # baseline lies in the first bucket (one day before improved, which ends the span)
    assert curves.reward["baseline"][0] == pytest.approx(0.625)
    assert curves.success["baseline"][0] == pytest.approx(0.4)
    assert curves.reward["improved"][-1] == pytest.approx(0.6875)
    assert curves.failures == {"sandbox_timeout": [1, 0, 0, 0]}


def test_curves_of_no_run_or_no_row_are_empty(populated_session: Session) -> None:
    assert inspector.curves(populated_session, TrajectoryFilter(), []).times == []
    assert inspector.curves(populated_session, TrajectoryFilter(), ["absent"]).times == []


def test_keyset_pages_cover_every_row_once_newest_first(populated_session: Session) -> None:
    seen: list[inspector.TrajectoryRow] = []
    cursor = None
    for _ in range(10):
        rows, cursor = inspector.trajectory_page(populated_session, TrajectoryFilter(), after=cursor, limit=3)
        seen.extend(rows)
        if cursor is None:
            break
    assert len(seen) == len({row.id for row in seen}) == 10
    assert [row.created_at for row in seen] == sorted((row.created_at for row in seen), reverse=True)
    token = inspector.PageCursor(created_at=seen[2].created_at, id=seen[2].id).token()
    rows, _ = inspector.trajectory_page(
        populated_session, TrajectoryFilter(), after=inspector.PageCursor.parse(token), limit=2
    )
    assert [row.id for row in rows] == [seen[3].id, seen[4].id]


@pytest.mark.parametrize("sort", ["reward-desc", "reward-asc"])
def test_keyset_pages_by_reward_cover_every_row_once_in_order(
    populated_session: Session, sort: inspector.TrajectorySort
) -> None:
    """Sorted by reward across pages of 3 (ties and an unscored row included): each row once, in order,
    the unscored one last whichever the direction."""
    seen: list[inspector.TrajectoryRow] = []
    cursor = None
    for _ in range(10):
        rows, cursor = inspector.trajectory_page(
            populated_session,
            TrajectoryFilter(),
            after=cursor,
            limit=3,
            sort=sort,
        )
        seen.extend(rows)
        if cursor is None:
            break
        cursor = inspector.PageCursor.parse(cursor.token())  # through the URL's form, as the page does
    assert len(seen) == len({row.id for row in seen}) == 10
    scored = [row.reward for row in seen if row.reward is not None]
    assert scored == sorted(scored, reverse=sort == "reward-desc")
    assert seen[-1].reward is None and len(scored) == 9
    for first, second in itertools.pairwise(seen):  # ties: newest first
        if first.reward == second.reward:
            assert (first.created_at, first.id) >= (second.created_at, second.id)


def test_a_cursor_of_another_order_is_refused(populated_session: Session) -> None:
    _, by_date = inspector.trajectory_page(populated_session, TrajectoryFilter(), limit=2)
    _, by_reward = inspector.trajectory_page(
        populated_session, TrajectoryFilter(), limit=2, sort="reward-desc"
    )
    assert by_date is not None and by_reward is not None and by_reward.reward is not None
    with pytest.raises(ValueError, match="sorted by reward"):
        inspector.trajectory_page(populated_session, TrajectoryFilter(), after=by_reward)
    with pytest.raises(ValueError, match="newest first"):
        inspector.trajectory_page(populated_session, TrajectoryFilter(), after=by_date, sort="reward-asc")
    with pytest.raises(ValueError, match="reward cursor"):
        inspector.PageCursor.parse("r=high|2026-11-20T10:00:00+00:00|x")


def test_compare_choices_are_the_stores_runs_and_policies(populated_session: Session) -> None:
    assert inspector.compare_choices(populated_session, TrajectoryFilter(), "run") == [
        "improved",
        "baseline",
        "math-run",
    ]
    assert inspector.compare_choices(populated_session, TrajectoryFilter(), "policy") == ["tiny-b", "tiny-a"]
    assert inspector.compare_choices(populated_session, TrajectoryFilter(env="math"), "run") == ["math-run"]
    other = TrajectoryFilter(tenant="someone-else")
    assert inspector.compare_choices(populated_session, other, "run") == []


def test_a_bad_cursor_is_refused() -> None:
    with pytest.raises(ValueError, match="cursor"):
        inspector.PageCursor.parse("no-separator")


def test_find_trajectory_honours_the_filter(populated_session: Session) -> None:
    record = inspector.find_trajectory(populated_session, TrajectoryFilter(), SHOWCASE)
    assert record is not None and record.reward == 1.0  # the last re-score's
    assert inspector.find_trajectory(populated_session, TrajectoryFilter(env="math"), SHOWCASE) is None


def test_compare_finds_better_and_worse_tasks(populated_session: Session) -> None:
    a = inspector.task_rewards(populated_session, TrajectoryFilter(run="baseline"))
    b = inspector.task_rewards(populated_session, TrajectoryFilter(run="improved"))
    assert a["t2"].count == 2 and a["t2"].reward_mean == 0.0
    comparison = compare_tasks(a, b)
    assert [(row.task_id, row.delta) for row in comparison.better] == [("t2", 1.0), ("t4", 0.25)]
    assert [(row.task_id, row.delta) for row in comparison.worse] == [("t3", -1.0)]
    assert (comparison.unchanged, comparison.only_a, comparison.only_b) == (1, 0, 0)
    by_policy = compare_tasks(
        inspector.task_rewards(populated_session, TrajectoryFilter(policy="tiny-a", env="tool_call")),
        inspector.task_rewards(populated_session, TrajectoryFilter(policy="tiny-b")),
    )
    assert [row.task_id for row in by_policy.better] == ["t2", "t4"]


def test_the_policy_filter_reads_its_expression_index(populated_session: Session) -> None:
    # The policy's model lives in a JSON column: without the index of revision 0002 the filter reads every
    # row whole (transcripts included). The plan must name the index.
    statement = select(func.count()).where(*TrajectoryFilter(policy="tiny-a").clauses())
    compiled = statement.compile(populated_session.get_bind(), compile_kwargs={"literal_binds": True})
    if populated_session.get_bind().dialect.name == "sqlite":
        plan = " ".join(str(row) for row in populated_session.execute(text(f"EXPLAIN QUERY PLAN {compiled}")))
    else:
        populated_session.execute(text("SET LOCAL enable_seqscan = off"))
        plan = " ".join(str(row) for row in populated_session.execute(text(f"EXPLAIN {compiled}")))
        populated_session.rollback()
    assert "ix_trajectories_policy_model" in plan
    assert (
        inspector.task_rewards(populated_session, TrajectoryFilter(policy="tiny-b"))["t2"].reward_mean == 1.0
    )


def test_with_statistics_a_tenant_scoped_read_uses_the_covering_indexes(tmp_path: Path) -> None:
    # Every row is the default tenant's, as on a server that ran without keys and then turned them on.
    # Without ANALYZE, SQLite took `tenant = ?` as selective and read the rows through the tenant index.
    url = f"sqlite:///{tmp_path / 'stats.db'}"
    populate(url)
    refresh_statistics(url)
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            where = TrajectoryFilter(tenant=DEFAULT_TENANT)
            page = (
                select(trajectories_table.c.id)
                .where(*where.clauses())
                .order_by(trajectories_table.c.created_at)
            )
            plan = " ".join(
                str(row) for row in session.execute(text(f"EXPLAIN QUERY PLAN {_literal(page, engine)}"))
            )
            assert "ix_trajectories_tenant" not in plan
            summaries, total = inspector.run_summaries(session, where)
            assert total == 3 and summaries[0].run == "improved"
    finally:
        engine.dispose()


def _literal(statement: Select[Any], engine: Engine) -> str:
    return str(statement.compile(engine, compile_kwargs={"literal_binds": True}))
