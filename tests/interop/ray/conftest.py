"""A real Ray cluster on loopback (a head and two replica nodes; later a node offering `sandbox` slots
only), throwaway PostgreSQL databases, and `gym-server serve --ray` in front of it: the fixtures the Ray
tests share (one cluster per module: starting Ray and the replicas takes most of the time). A second
entry point on the same cluster (`sandbox_stack`) leases its sandboxes from the sandbox node and reaches
its store through a proxy the tests cut."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/interop: gym_servers

from client import get
from gym_servers import free_port
from tcp_proxy import CuttableProxy

HERE = Path(__file__).resolve().parent
PYTHON = os.environ.get("GYM_INTEROP_PYTHON", "python3")
POSTGRES_ADMIN = os.environ.get("GYM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REPLICA_SLOTS = {"gym_replica": 2}  # each worker node offers two replica slots
SANDBOX_SLOTS = {"sandbox": 6}  # the sandbox node offers these and no replica slot
START_WAIT_S = 240.0


def ray_env(marker: str) -> dict[str, str]:
    """The environment of every process of the run: marked (to find leftovers), and on loopback only.

    Ray turns 127.0.0.1 into the host's routable address before connecting unless it takes the host for
    a laptop (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`); with it, every node and the entry point's driver
    stay on 127.0.0.1, as the tests must.
    """
    return {
        **os.environ,
        "GYM_RAY_TEST_MARKER": marker,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }


class ClusterHost:
    """The `cluster_host.py` process: Ray's own multi-node test cluster, driven over its stdin."""

    def __init__(self, marker: str) -> None:
        self.process = subprocess.Popen(
            [PYTHON, str(HERE / "cluster_host.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=ray_env(marker),
            text=True,
        )
        ready = self._read()
        self.address: str = ready["address"]

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the Ray cluster host exited ({self.process.wait()})")
        return dict(json.loads(line))

    def command(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._read()

    def add_node(self, resources: dict[str, float] | None = None) -> str:
        """A worker node of one CPU offering `resources` (default: replica slots)."""
        offered = REPLICA_SLOTS if resources is None else resources
        return str(self.command(add={"num_cpus": 1, "resources": offered})["node_id"])

    def kill_node(self, node_id: str) -> None:
        self.command(kill=node_id)

    def shutdown(self) -> None:
        if self.process.poll() is None:
            self.command(shutdown=True)
            self.process.wait(60)


@dataclass
class Stack:
    cluster: ClusterHost
    url: str
    gym: subprocess.Popen[bytes]
    database: str
    marker: str


@dataclass
class SandboxStack:
    """A second entry point on the same cluster: sandboxes on the sandbox node, its store behind a proxy."""

    stack: Stack
    url: str
    gym: subprocess.Popen[bytes]
    sandbox_node: str
    store_proxy: CuttableProxy


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (a replica's sandboxes, say), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def marked_processes(marker: str) -> list[int]:
    """Processes (Ray's, the replicas') whose environment carries this run's marker."""
    found = []
    needle = f"GYM_RAY_TEST_MARKER={marker}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def create_database(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_gym(
    cluster: ClusterHost,
    marker: str,
    port: int,
    database_url: str,
    *options: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`gym-server serve --ray` on the cluster, replicas on `gym_replica` slots; cwd outside the checkout,
    as a user's: nothing is imported from the repository by path."""
    command = [
        PYTHON, "-m", "gym_server", "serve", "--ray", "--ray-address", cluster.address,
        "--host", "127.0.0.1", "--port", str(port), "--database-url", database_url, "--log-level", "warning",
        "--replica-cpus", "0", "--replica-resources", json.dumps({"gym_replica": 1}), *options,
    ]  # fmt: skip
    return subprocess.Popen(command, env={**ray_env(marker), **(env or {})}, cwd="/")


def stop_gym(gym: subprocess.Popen[bytes]) -> None:
    if gym.poll() is None:
        gym.send_signal(signal.SIGTERM)
        gym.wait(90)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    marker = uuid.uuid4().hex
    database = f"gym_ray_{marker[:12]}"
    create_database(database)
    cluster = ClusterHost(marker)
    gym: subprocess.Popen[bytes] | None = None
    try:
        cluster.add_node()
        cluster.add_node()
        port = free_port()
        gym = start_gym(
            cluster, marker, port, f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}",
            "--sandbox-backend", "bubblewrap",
            "--workers", "2", "--max-workers", "3", "--target-sessions", "2",
        )  # fmt: skip
        stack = Stack(cluster, f"http://127.0.0.1:{port}", gym, database, marker)
        wait_for(lambda: len(replicas(stack)["replicas"]) == 2, START_WAIT_S, "two replicas up", gym)
        yield stack
    finally:
        if gym is not None:
            stop_gym(gym)
        cluster.shutdown()
        drop_database(database)


@pytest.fixture(scope="module")
def sandbox_stack(stack: Stack) -> Iterator[SandboxStack]:
    """One replica (on a `gym_replica` node) whose sandboxes run on a node that offers `sandbox` slots only,
    and whose store (its own database) is reached through a proxy the tests cut."""
    database = f"gym_ray_sbx_{stack.marker[:12]}"
    create_database(database)
    proxy = CuttableProxy(("127.0.0.1", 5432))
    gym: subprocess.Popen[bytes] | None = None
    try:
        sandbox_node = stack.cluster.add_node(SANDBOX_SLOTS)
        port = free_port()
        gym = start_gym(
            stack.cluster, stack.marker, port,
            f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/{database}?connect_timeout=2",
            "--sandbox-backend", "ray", "--workers", "1", "--max-workers", "1",
            env={"GYM_STORE__COMMIT_TIMEOUT_S": "2", "GYM_SANDBOX__HOST_BACKEND": "bubblewrap"},
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: len(replicas_at(url)["replicas"]) == 1, START_WAIT_S, "its replica up", gym)
        yield SandboxStack(stack, url, gym, sandbox_node, proxy)
    finally:
        if gym is not None:
            stop_gym(gym)
        proxy.close()
        drop_database(database)


def replicas(stack: Stack) -> dict[str, Any]:
    return replicas_at(stack.url)


def replicas_at(url: str) -> dict[str, Any]:
    status, body = get(url, "/v1/replicas")
    assert status == 200, body
    return dict(body)


def wait_for(
    condition: Any, timeout_s: float, what: str, process: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except OSError:
            pass  # the entry point is not listening yet
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the gym exited ({process.returncode}) before: {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.5)
