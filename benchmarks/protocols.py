"""Protocol facades against the native API: steps/s and step latency of each path, same server, one run.

Issue 12's target: each peer protocol's facade at >= 0.9 of the native API's steps/s on the same
environment and machine. The method is the session benchmark's (`sessions.py`): one real `gym-server
serve` process (uvicorn + uvloop + httptools) pinned to core 0, this load generator pinned to core 1,
C simulated clients with one connection each playing whole `counter` episodes for D seconds after a
warm-up. Every path plays the same episode: open it, K steps (`add(1)` K-1 times, then `submit`, which
ends and scores it), close it; only the steps are timed. The paths (the table `PATHS` below, one module
each: `_protocol_native.py`, `_protocol_openenv.py`, `_protocol_nemo_gym.py`) run one after another at
each client level, so drift over the run touches them alike. CPU of the server and of the load
generator is reported: a load generator near 100 % of its core means the client, not the server, set that
row's number.

Run `python benchmarks/protocols.py --quick` for a smoke run (seconds); the full run is
`python benchmarks/protocols.py` (1, 16 and 256 clients, 10 s each).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import cpu_seconds_self, error_kind, percentile, run
from _protocol_native import PATHS as NATIVE
from _protocol_nemo_gym import PATHS as NEMO_GYM
from _protocol_openenv import PATHS as OPENENV
from _protocol_path import EpisodeClient, PeerServer, ProtocolPath
from _sessions_system import (
    HOST,
    LOADGEN_CORE,
    SERVER_CORE,
    ManagedProcess,
    free_port,
    machine_description,
    pin,
    proc_cpu_seconds,
)
from _sessions_workload import wait_ready
from rich.console import Console
from rich.table import Table

# The first path is the baseline the others are compared with.
PATHS: list[ProtocolPath] = [*NATIVE, *OPENENV, *NEMO_GYM]
MAX_EPISODES_PER_CLIENT = 10_000_000  # loop bound; the duration ends a level long before this

console = Console(highlight=False, width=None if sys.stdout.isatty() else 180)


@dataclass(slots=True)
class Level:
    path: str
    clients: int
    seconds: float
    steps: list[float] = field(default_factory=list)
    episodes: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    server_cpu: float = 0.0
    loadgen_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.steps) / self.seconds

    @property
    def per_server_core(self) -> float:
        """Steps per second of server CPU: the rate with the core to itself, barely moved by neighbours."""
        busy = self.server_cpu * self.seconds
        return len(self.steps) / busy if busy else float("nan")

    def p(self, q: float) -> float:
        return percentile(sorted(self.steps), q) * 1e3


async def _connect_all(clients: list[EpisodeClient], errors: Counter[str]) -> list[EpisodeClient]:
    connected: list[EpisodeClient] = []
    for start in range(0, len(clients), 64):  # in batches, so the accept backlog never overflows
        batch = clients[start : start + 64]
        results = await asyncio.gather(*(c.connect() for c in batch), return_exceptions=True)
        for client, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                errors[f"connect: {error_kind(result)}"] += 1
            else:
                connected.append(client)
    return connected


async def run_level(
    path: ProtocolPath, port: int, server_pid: int, clients: int, args: argparse.Namespace
) -> Level:
    """C clients of `path` play episodes for the warm-up plus D seconds; only the D-second window counts."""
    level = Level(path.name, clients, args.duration)
    players = await _connect_all([path.client(HOST, port) for _ in range(clients)], level.errors)
    measure_from = time.perf_counter() + args.warmup
    deadline = measure_from + args.duration
    marks: list[tuple[float, float]] = []

    async def mark_window() -> None:
        for moment in (measure_from, deadline):
            await asyncio.sleep(max(0.0, moment - time.perf_counter()))
            marks.append((proc_cpu_seconds(server_pid), cpu_seconds_self()))

    async def play(index: int, client: EpisodeClient) -> None:
        clock, steps = time.perf_counter, level.steps
        for episode in range(MAX_EPISODES_PER_CLIENT):
            if clock() >= deadline:
                return
            try:
                await client.begin(index * 1000 + episode)
                began = clock()
                for k in range(args.steps):
                    started = clock()
                    await client.step(last=k == args.steps - 1)
                    if measure_from <= started < deadline:
                        steps.append(clock() - started)
                await client.end()
            except Exception as exc:
                level.errors[error_kind(exc)] += 1
                await asyncio.sleep(0.05)  # 429 or a broken connection: back off, don't spin
                continue
            if measure_from <= began < deadline:
                level.episodes += 1

    marker = asyncio.ensure_future(mark_window())
    try:
        await asyncio.gather(*(play(i, c) for i, c in enumerate(players)))
    finally:
        await marker
        await asyncio.gather(*(c.close() for c in players), return_exceptions=True)
    (server0, self0), (server1, self1) = marks
    level.server_cpu = (server1 - server0) / args.duration
    level.loadgen_cpu = (self1 - self0) / args.duration
    return level


async def peer_level(
    path: ProtocolPath, peer: PeerServer, clients: int, args: argparse.Namespace, workdir: Path
) -> Level:
    """One level against a peer's own server, started for it on the gym server's core and stopped after."""
    port = free_port()
    server = ManagedProcess(
        path.name, peer.argv(port), env=dict(os.environ), cwd=workdir, log=workdir / f"peer-{port}.log"
    )
    server.start(SERVER_CORE if args.pinned else None)
    try:
        await wait_ready(port, server, timeout_s=60.0, path=peer.ready_path)
        return await run_level(path, port, server.pid, clients, args)
    finally:
        server.stop()


async def benchmark(
    args: argparse.Namespace, server: ManagedProcess, port: int, workdir: Path
) -> list[Level]:
    await wait_ready(port, server, timeout_s=60.0)
    paths = []
    for path in PATHS:
        if path.server is not None and path.server.missing:
            console.print(f"[yellow]{path.name}: skipped, {path.server.missing}[/]")
        else:
            paths.append(path)
    levels: list[Level] = []
    for clients in args.clients:
        for path in paths:
            console.print(
                f"{path.name}, {clients} clients: {args.warmup:g} s warm-up + {args.duration:g} s ..."
            )
            if path.server is not None:
                levels.append(await peer_level(path, path.server, clients, args, workdir))
                continue
            levels.append(await run_level(path, port, server.pid, clients, args))
            if not server.alive():
                raise RuntimeError(
                    f"the server died during {path.name} at {clients} clients:\n{server.log_tail()}"
                )
            await asyncio.sleep(0.3)  # let the store's writer flush this level's closes
    return levels


def print_results(levels: list[Level], machine: dict[str, str], pinned: bool, load_end: str) -> None:
    table = Table(
        title=f"counter episodes (open, K steps, close; steps timed); 'vs native' is over {PATHS[0].name}"
    )
    for column in (
        "path",
        "clients",
        "steps/s",
        "vs native",
        "steps/server-core-s",
        "vs native",
        "p50 ms",
        "p99 ms",
        "episodes",
        "server CPU",
        "loadgen CPU",
        "errors",
    ):
        table.add_column(column, justify="left" if column in ("path", "errors") else "right")
    native = {level.clients: level for level in levels if level.path == PATHS[0].name}
    for level in levels:
        base = native.get(level.clients)
        rate, per_core = (base.rate, base.per_server_core) if base else (float("nan"), float("nan"))
        errors = ", ".join(f"{n} x {kind}" for kind, n in level.errors.most_common()) or "0"
        table.add_row(
            level.path,
            str(level.clients),
            f"{level.rate:,.0f}",
            f"{level.rate / rate:.2f}",
            f"{level.per_server_core:,.0f}",
            f"{level.per_server_core / per_core:.2f}",
            f"{level.p(50):.2f}",
            f"{level.p(99):.2f}",
            f"{level.episodes:,}",
            f"{level.server_cpu:.0%}",
            f"{level.loadgen_cpu:.0%}",
            errors,
        )
    console.print(table)
    console.print(
        f"machine  {machine['cpu']}, {machine['cores']} cores, {machine['ram']} RAM; {machine['packages']}"
    )
    console.print(f"code     git {machine['git']} (working tree as it is), {machine['date']}")
    console.print(f"load     average at start {machine['load']}, at end {load_end}")
    console.print(
        f"pinning  server on core {SERVER_CORE}, load generator on core {LOADGEN_CORE}"
        if pinned
        else "pinning  [yellow]none: fewer than 2 cores, numbers are not comparable[/]"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", default=None, help="comma-separated concurrency levels (1,16,256)")
    parser.add_argument("--steps", type=int, default=8, help="steps per episode (K), the last one submits")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per level (D)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each level")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1,4 clients, 1 s each")
    parser.add_argument("--server-log", default=None, help="keep the server's log at this path")
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.duration, args.warmup = args.clients or "1,4", 1.0, 0.2
    args.clients = [int(c) for c in str(args.clients or "1,16,256").split(",") if c.strip()]
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 4096:
        parser.error("--clients takes levels between 1 and 4096")
    if not 1 <= args.steps <= 1000 or not 0 < args.duration <= 3600:
        parser.error("--steps 1..1000, --duration 0..3600 s")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    pinned = args.pinned = (os.cpu_count() or 1) > LOADGEN_CORE and pin(0, LOADGEN_CORE)
    machine = machine_description()
    console.rule("[bold]gym-server protocol facades against the native API")
    with tempfile.TemporaryDirectory(prefix="gym-bench-protocols-") as workdir:
        port = free_port()
        env = {
            **os.environ,
            "GYM_HOST": HOST,
            "GYM_PORT": str(port),
            "GYM_DATABASE_URL": f"sqlite:///{workdir}/bench.db",
            "GYM_SERVER_NAME": "bench-protocols",
            "GYM_LOG_LEVEL": "warning",
            "GYM_SESSIONS__MAX_SESSIONS": str(max(10_000, 2 * max(args.clients) + 100)),
        }
        log = Path(args.server_log) if args.server_log else Path(workdir) / "server.log"
        server = ManagedProcess(
            "gym-server", [sys.executable, "-m", "gym_server", "serve"], env=env, cwd=Path(workdir), log=log
        )
        try:
            server.start(SERVER_CORE if pinned else None)
            levels = run(lambda: benchmark(args, server, port, Path(workdir)))
        except KeyboardInterrupt:
            console.print("[yellow]interrupted; stopping the server[/]")
            return 130
        except RuntimeError as exc:
            console.print(f"[red]{exc}[/]")
            return 1
        finally:
            code = server.stop()
            if code not in (None, 0):
                console.print(f"[yellow]server exited with {code}; log tail:[/]\n{server.log_tail(15)}")
    load_end = " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    print_results(levels, machine, pinned, load_end)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
