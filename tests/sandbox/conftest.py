"""Sandbox fixtures: each backend that can run here, with a leak check around every test.

`backend` is parametrized over bubblewrap and Docker (marked `bwrap` and `docker`); a backend that cannot
start here is skipped with its reason. After each test the fixture closes the backend and asserts that
nothing of it is left on the host: no processes of the uids it gave its sandboxes, no containers with its
labels, no mounts, no cgroups, no folders. Each check looks at this backend's own things only, so tests on
pytest-xdist workers can run side by side.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from echoserver import EchoServer

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox._host import process_statuses
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.docker import DockerBackend
from gym_server.sandbox.protocol import Limits, Sandbox, SandboxBackend

FAST = Limits(timeout_s=5.0)


def sandbox_uid_processes() -> list[tuple[int, int, str]]:
    """(pid, uid, state) of host processes running as a local-sandbox uid."""
    from gym_server.sandbox._local import LocalBackendBase

    low, high = LocalBackendBase.UID_BASE, LocalBackendBase.UID_BASE + LocalBackendBase.UID_SPAN
    found = []
    for pid, fields in process_statuses():
        uid = int(fields.get("Uid", "0").split()[0])
        if low <= uid < high:
            found.append((pid, uid, fields.get("State", "").strip()))
    return found


def managed_containers(server_name: str) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        found = client.api.containers(all=True, filters={"label": f"gym-server.server={server_name}"})
        return [c["Id"] for c in found]
    finally:
        client.close()


class RecordingBubblewrap(BubblewrapBackend):
    """Bubblewrap that remembers every host uid it gave a sandbox: the leak check looks at processes of
    those uids only, so sandboxes that other tests run at the same time (pytest-xdist workers) never count
    as this backend's leftovers."""

    def __init__(self, *, server_name: str) -> None:
        super().__init__(server_name=server_name)
        self.issued_uids: set[int] = set()

    def new_uid(self) -> int | None:
        uid = super().new_uid()
        if uid is not None:
            self.issued_uids.add(uid)
        return uid


async def _make(kind: str) -> SandboxBackend:
    name = f"gymtest-{uuid.uuid4().hex[:8]}"
    made = RecordingBubblewrap if kind == "bubblewrap" else DockerBackend
    backend: SandboxBackend = made(server_name=name)
    try:
        await backend.check()
    except SandboxUnavailable as exc:
        await backend.aclose()
        pytest.skip(f"{kind} backend unavailable: {exc.detail}")
    return backend


def _leftovers(backend: SandboxBackend) -> list[str]:
    problems: list[str] = []
    if isinstance(backend, DockerBackend):
        problems += [f"container {c[:12]}" for c in managed_containers(backend.server_name)]
    elif isinstance(backend, BubblewrapBackend):
        instance_dir = backend.instance_dir
        if instance_dir.exists():
            problems.append(f"folder {instance_dir}")
        mounts = Path("/proc/self/mounts").read_text()
        if str(instance_dir) in mounts:
            problems.append(f"mounts under {instance_dir}")
        cgroups = Path("/sys/fs/cgroup/pids/gym-sandbox")
        if cgroups.is_dir():
            problems += [f"cgroup {p.name}" for p in cgroups.iterdir() if p.name.startswith(backend.instance)]
    return problems


@contextlib.asynccontextmanager
async def checked_backend(kind: str) -> AsyncIterator[SandboxBackend]:
    """A checked backend of `kind` (skipped if unusable); closed afterwards, and nothing of it may remain."""
    made = await _make(kind)
    before = {pid for pid, _, _ in sandbox_uid_processes()}
    try:
        yield made
    finally:
        await made.aclose()
    assert _leftovers(made) == []
    if isinstance(made, RecordingBubblewrap):
        left = [p for p in sandbox_uid_processes() if p[0] not in before and p[1] in made.issued_uids]
        assert left == [], f"processes left behind: {left}"


@pytest.fixture(
    params=[
        pytest.param("bubblewrap", marks=pytest.mark.bwrap),
        pytest.param("docker", marks=pytest.mark.docker),
    ]
)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[SandboxBackend]:
    """Each backend in turn, leak-checked."""
    async with checked_backend(str(request.param)) as made:
        yield made


@pytest.fixture
async def docker_backend() -> AsyncIterator[DockerBackend]:
    async with checked_backend("docker") as made:
        assert isinstance(made, DockerBackend)
        yield made


@pytest.fixture
async def bwrap_backend() -> AsyncIterator[BubblewrapBackend]:
    async with checked_backend("bubblewrap") as made:
        assert isinstance(made, BubblewrapBackend)
        yield made


@pytest.fixture
async def sandbox(backend: SandboxBackend) -> AsyncIterator[Sandbox]:
    box = await backend.start(FAST, session_id="test-session")
    try:
        yield box
    finally:
        await box.close()


@pytest.fixture
def echo_servers() -> Iterator[tuple[EchoServer, EchoServer]]:
    """Two echo servers on loopback: one a test allows, and one it does not."""
    servers = (EchoServer(), EchoServer())
    yield servers
    for server in servers:
        server.close()
