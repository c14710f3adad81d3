"""Revision 0002 on a database that already holds trajectories: they get the `default` tenant (the one
a server without authentication writes), so keys of that tenant keep reading them. Runs on a new SQLite
file and a new PostgreSQL database (the run's shared one is already at head)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, insert, select
from store.conftest import throwaway_postgres

from gym_server.store.migrate import MIGRATIONS_DIR, make_engine, upgrade_database
from gym_server.store.models import trajectories_table
from gym_server.store.records import TrajectoryRecord
from gym_server.store.repository import record_to_row


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    with throwaway_postgres() as url:
        yield url


def _upgrade(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def test_rows_older_than_tenants_get_the_default_tenant(empty_database: str) -> None:
    engine = make_engine(empty_database)
    try:
        _upgrade(engine, "0001")
        record = record_to_row(TrajectoryRecord(id="old-1", env="counter", env_version="1", task_id="t"))
        with engine.connect() as connection:  # revision 0001's columns: no tenant, nor any added later
            known = set(connection.exec_driver_sql("SELECT * FROM trajectories WHERE 1 = 0").keys())
        row = {name: value for name, value in record.items() if name in known}
        with engine.begin() as connection:
            connection.execute(insert(trajectories_table).values(row))  # names only 0001's columns
        upgrade_database(empty_database)
        with engine.connect() as connection:
            stored = connection.execute(select(trajectories_table.c.id, trajectories_table.c.tenant)).all()
        assert [tuple(r) for r in stored] == [("old-1", "default")]
    finally:
        engine.dispose()
