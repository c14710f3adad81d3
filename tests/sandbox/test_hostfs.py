"""Host-side file access to sandbox folders never follows the sandbox's links or blocks on its FIFOs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gym_server.sandbox._hostfs import read_file, write_file


def test_round_trip_and_cap(tmp_path: Path) -> None:
    write_file(tmp_path, ["a", "b", "c.txt"], b"hello")
    assert read_file(tmp_path, ["a", "b", "c.txt"], 100) == b"hello"
    assert read_file(tmp_path, ["a", "b", "c.txt"], 2) == b"he"
    write_file(tmp_path, ["a", "b", "c.txt"], b"x")
    assert (tmp_path / "a/b/c.txt").read_bytes() == b"x"


def test_symlinked_file_and_folder_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    box = tmp_path / "box"
    box.mkdir()
    (box / "link").symlink_to(secret)
    (box / "dir").symlink_to(tmp_path)
    with pytest.raises(OSError):
        read_file(box, ["link"], 100)
    with pytest.raises(OSError):
        read_file(box, ["dir", "secret"], 100)
    with pytest.raises(OSError):
        write_file(box, ["link"], b"overwrite")
    with pytest.raises(OSError):
        write_file(box, ["dir", "new"], b"x")
    assert secret.read_text() == "host secret" and not (tmp_path / "new").exists()


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(OSError, match="regular"):
        read_file(tmp_path, ["pipe"], 100)
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path, ["missing"], 100)
    with pytest.raises(IsADirectoryError):
        read_file(tmp_path, [], 100)
