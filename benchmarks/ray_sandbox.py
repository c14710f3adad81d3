"""What a sandbox on a Ray sandbox host costs next to a local one (`--sandbox-backend ray`, docs/scale.md).

On a one-node Ray cluster offering `sandbox` slots, with bubblewrap on both sides: the start of a sandbox
(a lease from the host's warm pool, or a fresh local sandbox) and warm execs of `true` and
`python3 -c pass`, p50 and p99, in interleaved rounds (local, remote, local, ...), so machine load moves
both alike. The remote path adds the Ray actor call (loopback here; a network hop on a real cluster).

    python benchmarks/ray_sandbox.py [--rounds 3] [--execs 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
import uuid

import ray
from rich.console import Console
from rich.table import Table

from gym_server.core.settings import SandboxSettings
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.protocol import Limits, Sandbox, SandboxBackend
from gym_server.sandbox.ray_hosts import RayHostsBackend
from gym_server.scale.sandbox_host import SandboxHosts

COMMANDS = {"true": ["true"], "python3 -c pass": ["python3", "-c", "pass"]}


async def sample(backend: SandboxBackend, execs: int, results: dict[str, list[float]]) -> None:
    started = time.perf_counter()
    sandbox: Sandbox = await backend.start(Limits())
    results["start"].append(time.perf_counter() - started)
    try:
        for name, argv in COMMANDS.items():
            for _ in range(execs):
                began = time.perf_counter()
                assert (await sandbox.exec(argv)).ok
                results[name].append(time.perf_counter() - began)
    finally:
        await sandbox.close()


def row(label: str, values: list[float]) -> tuple[str, str, str]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return label, f"{statistics.median(ordered) * 1000:.1f}", f"{p99 * 1000:.1f}"


async def main(rounds: int, execs: int) -> None:
    ray.init(num_cpus=1, resources={"sandbox": 4}, namespace="gym-server", include_dashboard=False)
    hosts = SandboxHosts(f"bench-{uuid.uuid4().hex[:6]}", SandboxSettings(host_backend="bubblewrap"))
    await hosts.refresh()
    local = BubblewrapBackend(server_name="bench-local")
    remote = RayHostsBackend(server_name="bench-replica", hosts=hosts.prefix)
    await remote.check()
    kinds: dict[str, SandboxBackend] = {"local bubblewrap": local, "ray host (bubblewrap)": remote}
    results: dict[str, dict[str, list[float]]] = {
        kind: {key: [] for key in ("start", *COMMANDS)} for kind in kinds
    }
    load_before = os.getloadavg()[0]
    for _ in range(rounds):
        for kind, backend in kinds.items():
            await sample(backend, execs, results[kind])
    load_after = os.getloadavg()[0]
    table = Table(title=f"sandbox ops, {rounds} interleaved rounds x {execs} execs (ms)")
    for column in ("backend / op", "p50", "p99"):
        table.add_column(column)
    for kind, measured in results.items():
        for op, values in measured.items():
            table.add_row(*row(f"{kind}: {op}", values))
    console = Console()
    console.print(table)
    console.print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.processor() or platform.machine()}; "
        f"load average {load_before:.2f} before, {load_after:.2f} after; ray {ray.__version__}"
    )
    await remote.aclose()
    await local.aclose()
    await hosts.aclose()
    ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--execs", type=int, default=40)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rounds, arguments.execs))
