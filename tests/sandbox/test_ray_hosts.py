"""The `ray` sandbox backend against real `SandboxHost` actors on a one-node Ray cluster (bubblewrap).

The multi-node behaviour (a replica on one node, sandboxes on another, nodes killed) is proven through
the entry point in tests/interop/ray; this is the backend's contract: leases, every operation of the
`Sandbox` protocol over the host, a full host, an owner's leases released, a dead host.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from gym_server.core.errors import SandboxUnavailable
from gym_server.core.settings import SandboxSettings
from gym_server.sandbox.factory import select_backend
from gym_server.sandbox.protocol import Limits
from gym_server.sandbox.ray_hosts import RayHostsBackend

ray = pytest.importorskip("ray")

from gym_server.scale.sandbox_host import SandboxHosts  # noqa: E402 - needs Ray

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
SLOTS = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    context = ray.init(
        num_cpus=1,
        resources={"sandbox": SLOTS},
        namespace="gym-server",
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
    )
    yield str(context.address_info["gcs_address"])
    ray.shutdown()


@pytest.fixture
async def hosts(cluster: str) -> AsyncIterator[SandboxHosts]:
    started = SandboxHosts(
        f"test-{uuid.uuid4().hex[:8]}", SandboxSettings(host_backend="bubblewrap", pool_size=1)
    )
    await started.refresh()
    yield started
    await started.aclose()


def backend(hosts: SandboxHosts, owner: str = "replica-1") -> RayHostsBackend:
    return RayHostsBackend(server_name=owner, hosts=hosts.prefix)


async def test_a_leased_sandbox_runs_every_operation_on_its_host(hosts: SandboxHosts) -> None:
    [host] = hosts.describe()
    assert host["slots"] == SLOTS and host["backend"] == "bubblewrap"
    remote = backend(hosts)
    await remote.check()
    sandbox = await remote.start(Limits(timeout_s=5))
    result = await sandbox.exec(["python3", "-c", "print(6 * 7)"])
    assert result.ok and result.stdout == b"42\n"
    assert (await sandbox.exec("sleep 5", timeout=0.5)).timed_out
    await sandbox.put_file("data/a.txt", "hello")
    assert await sandbox.get_file("data/a.txt") == b"hello"
    with pytest.raises(FileNotFoundError):
        await sandbox.get_file("missing.txt")
    with pytest.raises(ValueError, match=r"\.\."):
        await sandbox.put_file("../escape", "x")
    process = await sandbox.spawn(
        ["python3", "-u", "-c", "import sys\nfor line in sys.stdin: print(line.strip()[::-1])"]
    )
    await process.write(b"abc\n")
    assert await process.readline(100, timeout=5) == b"cba\n"
    with pytest.raises(TimeoutError):
        await process.read(1, timeout=0.3)
    await process.kill()
    assert not process.alive
    assert await sandbox.scrub()
    assert not (await sandbox.exec("test -e data/a.txt")).ok
    await sandbox.close()
    assert sandbox.closed
    await hosts.refresh()
    assert hosts.describe()[0]["leased"] == 0


async def test_a_full_host_refuses_with_a_clear_error_and_a_close_frees_the_slot(hosts: SandboxHosts) -> None:
    remote = backend(hosts)
    held = [await remote.start() for _ in range(SLOTS)]
    with pytest.raises(SandboxUnavailable, match="no sandbox host has a free slot") as caught:
        await remote.start()
    assert f"{SLOTS}/{SLOTS} leased" in caught.value.detail
    await held[0].close()
    again = await RayHostsBackend(server_name="replica-1", hosts=hosts.prefix).start()
    assert (await again.exec("true")).ok
    await remote.aclose()
    await again.close()


async def test_releasing_an_owner_closes_only_its_sandboxes(hosts: SandboxHosts) -> None:
    dead, living = backend(hosts, "replica-dead"), backend(hosts, "replica-living")
    lost, kept = await dead.start(), await living.start()
    process = await lost.spawn(["sleep", "60"])
    await hosts.release("replica-dead")
    with pytest.raises(SandboxUnavailable, match="not leased"):
        await lost.exec("true")
    assert lost.closed and not process.alive
    assert (await kept.exec("true")).ok
    await hosts.refresh()
    assert hosts.describe()[0]["owners"] == ["replica-living"]
    await living.aclose()


async def test_a_dead_host_fails_calls_with_sandbox_unavailable(hosts: SandboxHosts) -> None:
    remote = backend(hosts)
    sandbox = await remote.start()
    ray.kill(hosts.hosts[next(iter(hosts.hosts))], no_restart=True)
    with pytest.raises(SandboxUnavailable, match="is gone"):
        await sandbox.exec("true")
    assert sandbox.closed
    await sandbox.close()  # idempotent, and quiet about the host it cannot reach
    with pytest.raises(SandboxUnavailable, match="no sandbox host"):
        await RayHostsBackend(server_name="replica-2", hosts=hosts.prefix).start()


async def test_the_factory_names_the_backend_and_refuses_without_hosts(cluster: str) -> None:
    with pytest.raises(SandboxUnavailable, match="no sandbox host runs"):
        await select_backend(SandboxSettings(backend="ray", ray_hosts="nobody-here"), server_name="r")
    with pytest.raises(SandboxUnavailable, match="tools folder"):
        await select_backend(SandboxSettings(backend="ray", tools_dir=os.getcwd()), server_name="r")
