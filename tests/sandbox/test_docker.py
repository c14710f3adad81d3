"""What only the Docker backend does: container settings, labels, reaping, engine failures, start gate."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox._host import start_time
from gym_server.sandbox.docker import (
    LABEL_HOST,
    LABEL_INSTANCE,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_SERVER,
    DockerBackend,
)
from gym_server.sandbox.protocol import Limits

pytestmark = pytest.mark.docker


def _inspect(container_id: str) -> dict[str, Any]:
    client = docker.from_env()
    try:
        return dict(client.api.inspect_container(container_id))
    finally:
        client.close()


async def test_container_is_locked_down_and_labelled(docker_backend: DockerBackend) -> None:
    limits = Limits(memory_mb=192, pids=40, cpus=0.5, disk_mb=32)
    box = await docker_backend.start(limits, session_id="sess-1")
    try:
        info = await asyncio.to_thread(_inspect, box.container_id)
        host, config = info["HostConfig"], info["Config"]
        assert host["NetworkMode"] == "none"
        assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["ReadonlyRootfs"] is True and host["Privileged"] is False
        assert set(host["Tmpfs"]) == {"/work", "/tmp"} and "size=32m" in host["Tmpfs"]["/work"]
        assert host["Memory"] == host["MemorySwap"] == 192 * 1024 * 1024
        assert host["PidsLimit"] == 40 and host["NanoCpus"] == 500_000_000 and host["Init"] is True
        assert config["User"] == "65533:65533"
        labels = config["Labels"]
        assert labels[LABEL_MANAGED] == "1" and labels["gym-server.session"] == "sess-1"
        assert labels[LABEL_SERVER] == docker_backend.server_name
        assert labels[LABEL_INSTANCE] == docker_backend.instance
        free = await box.exec("df -m /work | tail -1")
        assert free.stdout.split()[1] == b"32"
    finally:
        await box.close()


def _labelled(server_name: str, instance: str, *, host: str, owner: str) -> str:
    """A container labelled as if another gym process had made it."""
    client = docker.from_env()
    try:
        labels = {
            LABEL_MANAGED: "1",
            LABEL_SERVER: server_name,
            LABEL_INSTANCE: instance,
            LABEL_HOST: host,
            LABEL_OWNER: owner,
        }
        container = client.containers.run(
            "gym-sandbox:latest", detach=True, network_mode="none", labels=labels, init=True
        )
        return str(container.id)
    finally:
        client.close()


def _exists(container_id: str) -> bool:
    try:
        _inspect(container_id)
    except docker.errors.NotFound:
        return False
    return True


BOOT = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
PID_NS = os.readlink("/proc/self/ns/pid")


def _dead_owner() -> str:
    done = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return f"{BOOT}/{PID_NS}/{done.stdout.strip()}/0"


async def test_reaper_removes_what_dead_owners_left_and_spares_live_ones(
    docker_backend: DockerBackend,
) -> None:
    host = socket.gethostname()
    me = f"{BOOT}/{PID_NS}/{os.getpid()}/{start_time(os.getpid())}"
    unseen = f"{BOOT}/pid:[1]/1/0"  # another pid namespace on this machine: liveness unknown
    crashed = await asyncio.to_thread(_labelled, "any-server-name", "i1", host=host, owner=_dead_owner())
    elsewhere = await asyncio.to_thread(
        _labelled, docker_backend.server_name, "i2", host="another-host", owner="other-boot/y/1/1"
    )
    alive_here = await asyncio.to_thread(_labelled, "a-live-cli", "i3", host=host, owner=me)
    other_replica = await asyncio.to_thread(
        _labelled, "other-server", "i4", host="another-host", owner="x/y/1/1"
    )
    in_a_container = await asyncio.to_thread(_labelled, "any-server-name", "i5", host=host, owner=unseen)
    live = await docker_backend.start(Limits(timeout_s=5))
    try:
        # `elsewhere` carries this backend's name, so it is this reaper's alone; `crashed` may be taken
        # by any reaper on this machine first (another pytest-xdist worker's): whoever takes it, it goes.
        assert await docker_backend.reap() >= 1
        assert not await asyncio.to_thread(_exists, crashed)  # its process on this host is gone
        assert not await asyncio.to_thread(_exists, elsewhere)  # this server's name, restarted elsewhere
        assert await asyncio.to_thread(_exists, alive_here)  # a live process on this host
        assert await asyncio.to_thread(_exists, other_replica)  # another server's business
        assert await asyncio.to_thread(_exists, in_a_container)  # its owner cannot be seen from here
        assert (await live.exec("true")).ok
    finally:
        await live.close()
        for container_id in (alive_here, other_replica, in_a_container):
            await docker_backend.remove(container_id)


async def test_reaper_runs_on_a_timer(docker_backend: DockerBackend) -> None:
    # the orphan first: with the timer already running, it removed the container between its create and
    # its start on a loaded machine (409 "marked for removal"), failing the test, not the reaper
    orphan = await asyncio.to_thread(
        _labelled, docker_backend.server_name, "crash", host=socket.gethostname(), owner=_dead_owner()
    )
    docker_backend.start_reaper(interval_s=0.2)
    deadline = time.monotonic() + 30  # removing a container can take seconds on a busy engine
    while await asyncio.to_thread(_exists, orphan):
        assert time.monotonic() < deadline, "the timed reaper did not remove the orphan within 30 s"
        await asyncio.sleep(0.1)


async def test_unreachable_engine_is_a_clear_503() -> None:
    backend = DockerBackend(
        client_factory=lambda: docker.DockerClient(base_url="unix:///nonexistent/docker.sock")
    )
    with pytest.raises(SandboxUnavailable, match="does not answer") as caught:
        await backend.start()
    assert caught.value.status == 503
    await backend.aclose()


async def test_missing_image_names_the_fix(docker_backend: DockerBackend) -> None:
    backend = DockerBackend(image="gym-sandbox:no-such-tag", server_name=docker_backend.server_name)
    with pytest.raises(SandboxUnavailable, match="build-image"):
        await backend.check()
    await backend.aclose()


async def test_container_removed_mid_run_raises_not_hangs(docker_backend: DockerBackend) -> None:
    box = await docker_backend.start(Limits(timeout_s=20))
    run = asyncio.create_task(box.exec("sleep 15"))
    await asyncio.sleep(0.5)
    await asyncio.to_thread(docker_backend.api.remove_container, box.container_id, force=True)
    try:  # wait_for: a hang fails the test rather than blocking it for the exec's 15 s
        result = await asyncio.wait_for(run, 10)
        assert not result.ok
    except SandboxUnavailable:
        pass
    with pytest.raises(SandboxUnavailable):
        await box.exec("true")
    await box.close()


async def test_starts_are_rate_limited_and_cancellation_does_not_leak(docker_backend: DockerBackend) -> None:
    gated = DockerBackend(server_name=docker_backend.server_name, max_starts=2, starts_per_s=5.0)
    try:
        started = time.monotonic()
        boxes = await asyncio.gather(*(gated.start(Limits()) for _ in range(3)))
        assert time.monotonic() - started >= 0.35  # three starts at 5/s need two intervals
        for box in boxes:
            await box.close()
        doomed = asyncio.create_task(gated.start(Limits()))
        await asyncio.sleep(0.05)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
    finally:
        await gated.aclose()  # waits for the cancelled start and removes its container
