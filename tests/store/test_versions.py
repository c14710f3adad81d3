"""Policy versions on trajectories (`store.versions`, revision 0007): what counts as a version, an
episode's oldest and newest, and a migration that keeps revision 0004's triggers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from store.conftest import RecordFactory

from gym_server.store.migrate import make_engine, upgrade_database
from gym_server.store.models import trajectories_table, trajectory_totals_table
from gym_server.store.repository import record_to_row
from gym_server.store.versions import as_version, version_range


@pytest.mark.parametrize(
    ("value", "version"),
    [
        (3, 3),
        ("12", 12),
        (0, 0),
        (True, None),
        ("3.0", None),
        ("lora-7", None),
        ("٣", None),
        (None, None),
        (2.0, None),
    ],
)
def test_a_version_is_a_whole_number(value: Any, version: int | None) -> None:
    assert as_version(value) == version


def test_an_episode_spans_the_versions_of_its_calls() -> None:
    turns: list[dict[str, Any]] = [
        {"weight_version": 4},
        {"weight_version": "6"},
        {},
        {"weight_version": "lora"},
    ]
    # the calls without a version count at the episode's own (5)
    assert version_range({"weight_version": 5}, turns) == (4, 6)
    assert version_range({"weight_version": 5}, []) == (5, 5)
    assert version_range(None, [{}, {"weight_version": 2}]) == (2, 2)
    assert version_range({"model": "m"}, [{"source": "gateway"}]) == (None, None)


def test_the_revision_keeps_the_totals_triggers(tmp_path: Path, make_record: RecordFactory) -> None:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    upgrade_database(url)
    engine = make_engine(url)
    try:
        record = make_record(
            policy={"model": "m", "weight_version": 2}, reward=1.0, version_min=1, version_max=2
        )
        with engine.begin() as connection:
            connection.execute(insert(trajectories_table).values(record_to_row(record)))
            stored = connection.execute(
                select(trajectories_table.c.version_min, trajectories_table.c.version_max)
            ).one()
            totals = connection.execute(select(func.sum(trajectory_totals_table.c.episodes))).scalar_one()
        assert tuple(stored) == (1, 2)
        assert totals == 1
    finally:
        engine.dispose()
