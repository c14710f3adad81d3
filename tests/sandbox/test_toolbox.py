"""The sandbox tools folder: read-only inside bubblewrap sandboxes at /opt/gym-tools, refused clearly where
it cannot work (a missing or private folder, the unsafe runner)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.factory import make_backend
from gym_server.sandbox.protocol import Limits
from gym_server.sandbox.toolbox import TOOLS_MOUNT, check_tools_dir


@pytest.fixture
def tools() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="gym-tools-", dir="/tmp"))
    folder.chmod(0o755)
    (folder / "tool.txt").write_text("from the host\n")
    (folder / "tool.txt").chmod(0o644)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
async def bwrap_with_tools(tools: Path) -> AsyncIterator[BubblewrapBackend]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    backend = make_backend("bubblewrap", image="unused", server_name="gym-toolbox-test", tools_dir=tools)
    assert isinstance(backend, BubblewrapBackend)
    yield backend
    await backend.aclose()


@pytest.mark.bwrap
async def test_the_tools_folder_is_readable_and_read_only_inside(bwrap_with_tools: BubblewrapBackend) -> None:
    box = await bwrap_with_tools.start(Limits(timeout_s=10))
    try:
        read = await box.exec(["cat", f"{TOOLS_MOUNT}/tool.txt"])
        assert read.ok and read.stdout == b"from the host\n"
        write = await box.exec(f"echo changed > {TOOLS_MOUNT}/tool.txt")
        assert write.exit_code != 0 and b"Read-only file system" in write.stderr
        assert (await box.exec(f"touch {TOOLS_MOUNT}/new")).exit_code != 0
    finally:
        await box.close()
    assert not (bwrap_with_tools.tools_dir / "new").exists()  # type: ignore[operator]


@pytest.mark.bwrap
async def test_without_a_tools_folder_there_is_none_inside() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    backend = BubblewrapBackend(server_name="gym-toolbox-none")
    box = await backend.start(Limits(timeout_s=10))
    try:
        assert (await box.exec(["ls", TOOLS_MOUNT])).exit_code != 0
    finally:
        await backend.aclose()


def test_a_missing_or_private_folder_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="is not an existing folder"):
        make_backend("bubblewrap", image="x", server_name="y", tools_dir=tmp_path / "absent")
    private = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        private.chmod(0o700)
        with pytest.raises(ValueError, match="readable by all"):
            check_tools_dir(private)
        private.chmod(0o755)
        (private / "inner").mkdir(mode=0o755)
        private.chmod(0o750)
        with pytest.raises(ValueError, match="cannot pass"):
            check_tools_dir(private / "inner")
    finally:
        private.chmod(0o755)
        shutil.rmtree(private)


def test_the_unsafe_runner_refuses_a_tools_folder(tools: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="cannot show a tools folder"):
        make_backend("unsafe-no-sandbox", image="x", server_name="y", tools_dir=tools)
