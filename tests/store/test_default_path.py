"""The default store's path: the same file from any current directory, GYM_HOME and XDG_DATA_HOME
honoured, the explicit settings still first (issue 24)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_server.core.settings import Settings, default_store_path, stray_store_path


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No store settings in the environment; HOME in tmp_path, the current directory elsewhere."""
    for name in ("GYM_HOME", "XDG_DATA_HOME", "GYM_DATABASE_URL", "GYM_STORE__URL", "GYM_STORE__PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path


def test_the_default_is_the_xdg_data_folder_whatever_the_current_directory(
    bare: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = bare / "user" / ".local" / "share" / "gym-server" / "gym.db"
    assert default_store_path() == expected
    assert Settings().store.resolved_url() == f"sqlite:///{expected}"
    monkeypatch.chdir(bare)
    assert Settings().store.resolved_url() == f"sqlite:///{expected}"


def test_xdg_data_home_then_gym_home_move_it(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(bare / "data"))
    assert default_store_path() == bare / "data" / "gym-server" / "gym.db"
    monkeypatch.setenv("GYM_HOME", str(bare / "gym"))
    assert default_store_path() == bare / "gym" / "gym.db"


def test_explicit_settings_win_over_the_default(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_STORE__PATH", "~/mine.db")
    assert Settings().store.resolved_url() == f"sqlite:///{bare / 'user' / 'mine.db'}"
    monkeypatch.setenv("GYM_STORE__URL", "postgresql+psycopg://gym@db/gym")
    assert Settings().store.resolved_url() == "postgresql+psycopg://gym@db/gym"


def test_an_old_relative_store_is_reported_unless_it_is_the_one_in_use(
    bare: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = bare / "elsewhere"
    assert stray_store_path(Settings().store) is None
    (cwd / "var").mkdir()
    (cwd / "var" / "gym.db").write_bytes(b"")
    assert stray_store_path(Settings().store) == cwd / "var" / "gym.db"
    warning = Settings().store.stray_warning()
    assert warning is not None
    assert str(cwd / "var" / "gym.db") in warning
    assert str(default_store_path()) in warning
    monkeypatch.setenv("GYM_STORE__PATH", "var/gym.db")
    assert stray_store_path(Settings().store) is None
    monkeypatch.delenv("GYM_STORE__PATH")
    monkeypatch.setenv("GYM_DATABASE_URL", "sqlite:///elsewhere.db")
    assert stray_store_path(Settings().store) is None
