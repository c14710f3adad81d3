"""`gym-server serve --workers N` on one SQLite file warns, in one line, what to use instead (SQLite takes
one writer at a time, so the replicas would queue on its lock); on PostgreSQL, or with one replica, it
does not. The replicas themselves are not started here."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym_server.cli import serve
from gym_server.cli.main import app

runner = CliRunner()
WARNING = "share one SQLite file"


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many replicas `serve` went on to start, with the starting itself replaced."""
    calls: list[int] = []
    monkeypatch.setattr(serve, "_run_replicas", lambda settings, workers: calls.append(workers))
    monkeypatch.setattr(serve, "_run_replica", lambda settings: calls.append(1))
    return calls


def _serve(*argv: str) -> str:
    result = runner.invoke(app, ["serve", *argv], terminal_width=400)
    assert result.exit_code == 0, result.output
    return result.output


def test_workers_on_one_sqlite_file_warn_with_what_to_use_instead(tmp_path: Path, started: list[int]) -> None:
    output = _serve("--workers", "2", "--database-url", f"sqlite:///{tmp_path / 'gym.db'}")
    line = next(line for line in output.splitlines() if WARNING in line)
    assert "PostgreSQL" in line and "its own --port and SQLite file" in line
    assert started == [2]  # a warning, not a refusal: the replicas still start


def test_one_replica_or_postgresql_does_not_warn(tmp_path: Path, started: list[int]) -> None:
    assert WARNING not in _serve("--database-url", f"sqlite:///{tmp_path / 'gym.db'}")
    postgres = "postgresql+psycopg://postgres@127.0.0.1:5432/never_used"
    assert WARNING not in _serve("--workers", "2", "--database-url", postgres)
    assert started == [1, 2]
