"""`serve --workers N` on one database: steps/s of all replicas together, and the close latency.

    python benchmarks/sessions_replicas.py --workers 1,2 --clients 16
    python benchmarks/sessions_replicas.py --workers 1,2 --database-url postgresql+psycopg://...

For each N it starts `gym-server serve --workers N` (N replicas on consecutive ports, one shared
database: a fresh SQLite file per N by default), spreads the clients evenly over the replicas and runs
`sessions.py`'s episode workload (create, K steps, verify, close) against all of them at once. With
`--pin` (the default on a machine with 2 cores or more) every replica shares the server core and the load
generator has the other: N replicas then get the CPU one had, so steps/s at N over steps/s at 1 is what
sharing the database costs beyond CPU (1.0: nothing). On a larger host, pass `--no-pin` to measure scaling.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import run
from _sessions_report import console, fmt_ms
from _sessions_system import LOADGEN_CORE, SERVER_CORE, ManagedProcess, free_port, gym_env, pin
from _sessions_workload import LevelResult, run_level, wait_ready
from rich.table import Table


def _ports(workers: int) -> int:
    """A base port with `workers` free ports after it (checked, not guaranteed, until they bind)."""
    for _ in range(50):
        base = free_port()
        if base + workers < 65536 and all(_free(base + i) for i in range(1, workers)):
            return base
    raise RuntimeError(f"no {workers} consecutive free ports found")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def measure(
    workers: int, server: ManagedProcess, base: int, args: argparse.Namespace
) -> list[LevelResult]:
    ports = [base + i for i in range(workers)]
    for port in ports:
        await wait_ready(port, server, timeout_s=120.0)
    shares = [args.clients // workers + (1 if i < args.clients % workers else 0) for i in range(workers)]
    return list(
        await asyncio.gather(
            *(
                run_level(port, server, share, args)
                for port, share in zip(ports, shares, strict=True)
                if share
            )
        )
    )


def _load1() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="comma-separated replica counts")
    parser.add_argument("--clients", type=int, default=16, help="clients in all, spread over the replicas")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds over the replica counts")
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each run")
    parser.add_argument("--steps", type=int, default=8, help="steps per episode")
    parser.add_argument("--database-url", default=None, help="shared database (default: a SQLite file)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None, help="see above")
    args = parser.parse_args(argv)
    args.workers = [int(n) for n in args.workers.split(",") if n.strip()]
    if (
        not args.workers
        or min(args.workers) < 1
        or max(args.workers) > 64
        or args.clients < max(args.workers)
    ):
        parser.error("--workers 1..64, and at least one client per replica")
    if args.pin is None:
        args.pin = (os.cpu_count() or 1) > LOADGEN_CORE
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.pin:
        pin(0, LOADGEN_CORE)
    load = " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    console.print(f"{os.cpu_count()} cores, load {load}, {'replicas on core 0' if args.pin else 'unpinned'}")
    results: dict[int, list[tuple[float, float]]] = {n: [] for n in args.workers}
    with tempfile.TemporaryDirectory(prefix="gym-replicas-") as tmp:
        for round_ in range(args.rounds):
            for workers in args.workers if round_ % 2 == 0 else args.workers[::-1]:
                home = Path(tmp) / f"r{round_}-n{workers}"
                home.mkdir()
                base = _ports(workers)
                url = args.database_url or f"sqlite:///{home}/gym.db"
                env = gym_env(base, url, args.clients + 100)
                argv = [sys.executable, "-m", "gym_server", "serve", "--workers", str(workers)]
                server = ManagedProcess("gym", argv, env=env, cwd=home, log=home / "server.log")
                try:
                    server.start(SERVER_CORE if args.pin else None)
                    levels = run(lambda: measure(workers, server, base, args))  # noqa: B023 - run at once
                finally:
                    server.stop()
                rate = sum(level.steps for level in levels) / args.duration
                closes = sorted(lat for level in levels for lat in level.latencies["delete"])
                close_p99 = (
                    closes[min(len(closes) - 1, int(0.99 * len(closes)))] * 1e3 if closes else float("nan")
                )
                errors = sum(sum(level.errors.values()) for level in levels)
                results[workers].append((rate, close_p99))
                console.print(
                    f"round {round_ + 1}, {workers} replica(s): {rate:,.0f} steps/s, close p99 "
                    f"{fmt_ms(close_p99)} ms, errors {errors}, load {_load1()}"
                )
    table = Table(title=f"serve --workers N, one shared database, {args.clients} clients in all")
    for column in ("replicas", "steps/s (rounds)", "of N = 1 (medians)", "close p99 ms"):
        table.add_column(column, justify="right")
    one = statistics.median(rate for rate, _ in results[args.workers[0]])
    for workers, runs in results.items():
        table.add_row(
            str(workers),
            ", ".join(f"{rate:,.0f}" for rate, _ in runs),
            f"{statistics.median(rate for rate, _ in runs) / one:.2f}",
            ", ".join(fmt_ms(p99) for _, p99 in runs),
        )
    console.print(table)
    console.print(f"load average at the end: {' / '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
