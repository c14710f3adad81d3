"""`gym-server db` and `gym-server export`, invoked as the integrated CLI wires them."""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import typer
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from gym_server.cli import db, export
from gym_server.core.extras import MissingExtra
from gym_server.store.migrate import make_engine, upgrade_database
from gym_server.store.records import TrajectoryRecord
from gym_server.store.repository import upsert_trajectories

RecordFactory = Callable[..., TrajectoryRecord]

cli = typer.Typer()
cli.add_typer(db.app, name="db")
cli.command()(export.export)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, wide_terminal: None) -> CliRunner:
    monkeypatch.chdir(tmp_path)  # no stray .env, and the default SQLite path lands here
    for name in ("GYM_DATABASE_URL", "GYM_STORE__URL", "GYM_STORE__PATH"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def test_db_upgrade_and_current(runner: CliRunner, empty_url: str) -> None:
    before = runner.invoke(cli, ["db", "current", "--database-url", empty_url])
    assert before.exit_code == 0, before.output
    assert "revision none, head 0007" in before.output
    first = runner.invoke(cli, ["db", "upgrade", "--database-url", empty_url])
    assert first.exit_code == 0, first.output
    assert "Upgraded to head revision 0007 (from an empty schema)" in first.output
    again = runner.invoke(cli, ["db", "upgrade", "--database-url", empty_url])
    assert "Already at head revision 0007" in again.output
    after = runner.invoke(cli, ["db", "current", "--database-url", empty_url])
    assert "revision 0007, head 0007, up to date" in after.output


def test_db_url_defaults_to_the_server_settings(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default store is `$GYM_HOME/gym.db`, wherever the command runs from (never ./var/gym.db)."""
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))
    result = runner.invoke(cli, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert f"Database sqlite:///{tmp_path / 'home' / 'gym.db'}" in result.output
    assert (tmp_path / "home" / "gym.db").is_file()
    assert not (tmp_path / "var").exists()
    monkeypatch.setenv("GYM_DATABASE_URL", f"sqlite:///{tmp_path / 'other.db'}")
    result = runner.invoke(cli, ["db", "current"])
    assert f"Database sqlite:///{tmp_path / 'other.db'}: revision none" in result.output


def test_an_old_store_in_the_current_directory_is_named_not_used(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upgrading from the cwd-relative default: ./var/gym.db is not silently ignored (nor split into)."""
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "gym.db").write_bytes(b"")
    result = runner.invoke(cli, ["db", "current"])
    assert result.exit_code == 0, result.output
    warning = " ".join(result.stderr.split())
    assert "warning:" in warning
    assert str(tmp_path / "var" / "gym.db") in warning
    assert str(tmp_path / "home" / "gym.db") in warning
    assert f"GYM_STORE__PATH={tmp_path / 'var' / 'gym.db'}" in warning
    # Following the advice makes it the store in use, and the warning goes away.
    monkeypatch.setenv("GYM_STORE__PATH", str(tmp_path / "var" / "gym.db"))
    again = runner.invoke(cli, ["db", "current"])
    assert "warning" not in again.stderr
    assert f"Database sqlite:///{tmp_path / 'var' / 'gym.db'}" in " ".join(again.output.split())


@pytest.mark.postgres
def test_db_upgrade_failure_hides_the_password(runner: CliRunner) -> None:
    url = "postgresql+psycopg://postgres:hunter2@127.0.0.1:5432/gym_no_such_database"
    result = runner.invoke(cli, ["db", "upgrade", "--database-url", url])
    assert result.exit_code == 1
    assert "postgres:***@127.0.0.1" in result.output
    assert "cannot upgrade the trajectory database" in result.stderr
    assert "does not exist" in result.stderr
    assert "hunter2" not in result.output


def test_export_command(
    runner: CliRunner, store_url: str, tmp_path: Path, make_record: RecordFactory
) -> None:
    records = [make_record(run="r1" if n % 2 else "r2") for n in range(6)]
    engine = make_engine(store_url)
    with Session(engine) as session, session.begin():
        upsert_trajectories(session, records)
    engine.dispose()

    out = tmp_path / "dump" / "r1.jsonl"
    args = ["export", str(out), "--database-url", store_url, "--run", "r1", "--limit", "2"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"Exported 2 trajectories as jsonl to {out}" in result.stderr
    assert [TrajectoryRecord.model_validate_json(line).id for line in out.read_text().splitlines()] == [
        records[5].id,
        records[3].id,
    ]

    parquet = tmp_path / "all.parquet"  # format follows the suffix
    result = runner.invoke(cli, ["export", str(parquet), "--database-url", store_url, "--status", "live"])
    assert result.exit_code == 0, result.output
    assert pq.read_table(parquet).num_rows == 6

    forced = tmp_path / "all.data"
    result = runner.invoke(cli, ["export", str(forced), "-f", "parquet", "--database-url", store_url])
    assert result.exit_code == 0, result.output
    assert pq.read_table(forced).num_rows == 6


def test_export_without_pyarrow(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    upgrade_database(url)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    result = runner.invoke(cli, ["export", str(tmp_path / "x.parquet"), "--database-url", url])
    # the console script turns it into one line (tests/cli/test_entry_point.py)
    assert isinstance(result.exception, MissingExtra)
    assert "pip install 'gym-server[parquet]'" in str(result.exception)
    assert not (tmp_path / "x.parquet").exists()


def test_export_writes_the_format_its_suffix_names_or_refuses(
    runner: CliRunner, store_url: str, tmp_path: Path, make_record: RecordFactory
) -> None:
    engine = make_engine(store_url)
    with Session(engine) as session, session.begin():
        upsert_trajectories(session, [make_record(run="r1") for _ in range(3)])
    engine.dispose()
    out = tmp_path / "runs.csv"
    result = runner.invoke(cli, ["export", str(out), "--database-url", store_url])
    assert result.exit_code == 0, result.output
    assert f"Exported 3 trajectories as csv to {out}" in result.stderr
    with out.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [row["run"] for row in rows] == ["r1"] * 3
    unknown = tmp_path / "runs.txt"
    refused = runner.invoke(cli, ["export", str(unknown), "--database-url", store_url])
    assert refused.exit_code == 2
    assert "cannot tell an export format from 'runs.txt'" in " ".join(refused.stderr.split())
    assert not unknown.exists()
