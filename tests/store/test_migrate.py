"""Migrations and engines: an empty database gets the schema the models describe, once, on both backends."""

from __future__ import annotations

import multiprocessing
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from gym_server.store.migrate import current_revision, head_revision, make_engine, mask_url, upgrade_database
from gym_server.store.models import Base
from gym_server.store.write_link import loop_engine, write_engine


def test_upgrade_creates_the_schema_once(empty_url: str) -> None:
    assert current_revision(empty_url) is None
    upgrade_database(empty_url)
    upgrade_database(empty_url)  # idempotent
    assert current_revision(empty_url) == head_revision() == "0007"
    engine = make_engine(empty_url)
    try:
        inspector = inspect(engine)
        # The inspector's expression index on the policy's model (SQLite cannot reflect it; tests/ui checks
        # that the policy filter uses it).
        warnings.filterwarnings("ignore", "Skipped unsupported reflection of expression-based index")
        warnings.filterwarnings("ignore", "autogenerate skipping metadata-specified expression-based index")
        assert set(inspector.get_table_names()) == {
            "alembic_version",
            "trajectories",
            "rescores",
            "api_keys",
            "trajectory_totals",
            "policy_runs",
            "policy_versions",
            "buffer_groups",
            "buffer_leases",
        }
        indexes = inspector.get_indexes("trajectories")
        indexed = {
            tuple(index["column_names"])
            for index in indexes
            if index["name"] != "ix_trajectories_policy_model"
        }
        assert indexed == {
            # revision 0001's; run's and env's dropped by 0005, as the page indexes begin with them
            *[(column,) for column in ("task_id", "status", "created_at", "server_name")],
            ("tenant",),
            ("parent_id",),  # revision 0006: an episode's forks
            # the rollout inspector's (revision 0003)
            ("run", "created_at", "id", "task_id", "reward", "failure", "tenant"),
            ("env", "created_at", "id", "run", "reward", "failure", "tenant"),
            ("env_version", "run", "created_at", "task_id", "reward", "failure", "tenant"),
            ("verifier_version", "run", "created_at", "task_id", "reward", "failure", "tenant"),
            # the rollout buffer's episodes, a partial index (revision 0007)
            ("buffer_group",),
        }
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []  # the revision matches the models
    finally:
        engine.dispose()


def test_replicas_migrating_together_do_not_race(empty_url: str) -> None:
    # Separate processes, as replicas and separate `serve` commands are: without the advisory lock
    # (PostgreSQL) or the file lock (SQLite) two of them collide on CREATE TABLE alembic_version.
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(upgrade_database, [empty_url] * 3))
    assert current_revision(empty_url) == head_revision()


def test_sqlite_engine_settings(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "gym.db"
    for url, busy_ms in ((f"sqlite:///{path}", 5000), (f"sqlite:///{path}?timeout=0.25", 250)):
        engine = make_engine(url)
        try:
            with engine.connect() as connection:
                pragma = connection.exec_driver_sql
                assert pragma("PRAGMA journal_mode").scalar() == "wal"
                assert pragma("PRAGMA synchronous").scalar() == 1  # NORMAL
                assert pragma("PRAGMA busy_timeout").scalar() == busy_ms
                assert pragma("PRAGMA foreign_keys").scalar() == 1
        finally:
            engine.dispose()
    assert path.is_file()


def test_unsupported_database() -> None:
    with pytest.raises(ValueError, match=r"unsupported database 'mysql'.*use sqlite or postgresql"):
        make_engine("mysql://root:pw@localhost/gym")


def test_mask_url() -> None:
    assert (
        mask_url("postgresql+psycopg://gym:s3cret@db:5432/gym") == "postgresql+psycopg://gym:***@db:5432/gym"
    )
    assert mask_url("sqlite:///var/gym.db") == "sqlite:///var/gym.db"


def test_write_engines_keep_statement_journals_in_memory(tmp_path: Path) -> None:
    # A trajectory upsert's statement journal outgrows SQLite's 64 KiB in memory and spilled to a
    # temporary file on every commit; the writers' engines keep it in memory, the reads' (large sorts) not.
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    upgrade_database(url)
    engines = {"reads": make_engine(url), "writer": write_engine(url), "loop": loop_engine(url)}
    try:
        settings = {}
        for name, engine in engines.items():
            assert engine is not None
            with engine.connect() as connection:
                pragma = connection.exec_driver_sql
                settings[name] = (
                    pragma("PRAGMA temp_store").scalar(),
                    pragma("PRAGMA busy_timeout").scalar(),
                )
        assert settings == {"reads": (0, 5000), "writer": (2, 5000), "loop": (2, 0)}  # 2: MEMORY
    finally:
        for engine in engines.values():
            if engine is not None:
                engine.dispose()
