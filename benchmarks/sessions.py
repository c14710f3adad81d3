"""Session benchmark: episodes per second, step latency, errors and memory of a real gym-server process.

What it measures, and why this way (issue 2 "Benchmark", design.md "Targets to benchmark"):

* The server runs as its own process, exactly as `gym-server serve` runs it (uvicorn + uvloop +
  httptools), pinned to core 0, with its database in a temporary directory; this script (the load
  generator) pins itself to core 1. Pinning keeps the two from stealing each other's core, so
  "steps/s on one server core" means what it says.
* C simulated clients each hold one keep-alive connection and loop over whole episodes of the trivial
  `counter` environment (create, K steps, verify, delete) for D seconds after a short warm-up. The
  counter's tools cost microseconds, so the numbers are the server's per-request overhead: routing,
  validation, the session manager, the trajectory store's bookkeeping.
* The client is `_loadgen.py`, a raw-asyncio HTTP/1.1 client, because httpx would saturate its own
  core first. Its correctness is checked against the live server before anything is timed, and its
  ceiling is measured against a canned-response stub and against `GET /healthz` so readers can see
  the headroom. CPU used by the server and by the load generator is reported for every level: a load
  generator well below 100% of its core was not the bottleneck.
* A side-by-side phase (issue 13, `_sessions_peers.py`) plays `protocols.py`'s episode against the gym,
  the bare Starlette echo floor (`peers/starlette_echo.py`) and OpenEnv's own WebSocket server
  (`peers/openenv_counter.py`, from the openenv peer's venv), each pinned to the server core, interleaved
  over `--peer-rounds` rounds, with the load average after every level: the ratios to the floor and to
  OpenEnv that issue 13's targets are stated in.
* A "held sessions" phase opens N sessions, reports resident memory over the baseline, steps a sample
  of them to prove they are alive, and closes them all.

The pieces: `_sessions_system.py` (machine, pinning, /proc readings, child processes),
`_sessions_workload.py` (self-check, episode levels, held sessions, ceiling, their results) and
`_sessions_report.py` (console tables and the docs section); this script parses the flags and runs them.

Every loop is bounded in count and time; the server and the stub are stopped on exit, error or Ctrl-C.
Run `python benchmarks/sessions.py --quick` for a smoke run, `--write-docs` to update docs/benchmarks.md;
`sessions_against.py --against <git ref>` runs this workload on that ref and the working tree side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import (
    run,
)
from _profile import PySpy
from _sessions_peers import print_side_by_side, side_by_side
from _sessions_report import (
    DOCS,
    console,
    fmt_errors,
    fmt_ms,
    print_ceiling,
    print_checks,
    print_machine,
    print_profile,
    print_results,
    write_docs,
)
from _sessions_system import (
    HOST,
    LOADGEN_CORE,
    REPO,
    SERVER_CORE,
    ManagedProcess,
    free_port,
    gym_env,
    machine_description,
    pin,
    proc_rss_mb,
)
from _sessions_workload import Report, measure_ceiling, run_held, run_level, self_check, wait_ready

# -- orchestration -----------------------------------------------------------------------------------


async def benchmark(args: argparse.Namespace, server: ManagedProcess, port: int, report: Report) -> None:
    # While the loop runs, SIGTERM cancels the run cleanly (a KeyboardInterrupt raised from a signal
    # handler inside a transport callback would tear a connection down mid-read instead).
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    await wait_ready(port, server, timeout_s=60.0)
    report.server_rss_start_mb = proc_rss_mb(server.pid)
    console.print(f"server pid {server.pid} ready on {HOST}:{port}, RSS {report.server_rss_start_mb:.1f} MB")
    if not await self_check(port, report):
        print_checks(report)
        raise RuntimeError("the load generator's self-check failed; no numbers were taken")
    print_checks(report)
    if args.ceiling_duration > 0:
        console.print(f"measuring the load generator's ceiling ({args.ceiling_duration:g} s per level) ...")
        await measure_ceiling(args, Path(args.workdir), port, report, SERVER_CORE if report.pinned else None)
        print_ceiling(report)
    spy = None
    if args.profile:
        # Sampling runs on the load generator's core: it costs the server nothing but a few reads.
        spy = PySpy(server.pid, Path(args.profile), core=LOADGEN_CORE if report.pinned else None)
        spy.start()
    try:
        await run_levels(args, server, port, report)
    finally:
        if spy is not None:
            console.print(f"[dim]{spy.stop().strip()}[/]")
    if args.peer_rounds > 0:
        console.print(f"the floor and OpenEnv's own server side by side, {args.peer_rounds} round(s) ...")
        report.side_by_side = await side_by_side(args, server, port, Path(args.workdir), console)
    if args.sessions_held > 0:
        console.print(f"holding {args.sessions_held:,} sessions ...")
        report.held = await run_held(port, server, args)


async def run_levels(args: argparse.Namespace, server: ManagedProcess, port: int, report: Report) -> None:
    for clients in args.clients:
        console.print(f"{clients} clients: {args.warmup:g} s warm-up + {args.duration:g} s ...")
        level = await run_level(port, server, clients, args)
        report.levels.append(level)
        if not server.alive():
            raise RuntimeError(f"the server died during the {clients}-client level:\n{server.log_tail()}")
        console.print(
            f"  {level.steps / level.seconds:,.0f} steps/s, p50 {fmt_ms(level.p('step', 50))} ms, "
            f"p99 {fmt_ms(level.p('step', 99))} ms, errors {fmt_errors(level.errors)}"
        )


# -- entry point -------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", default=None, help="comma-separated concurrency levels (1,16,256)")
    parser.add_argument("--steps", type=int, default=8, help="steps per episode (K)")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per level (D)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each level")
    parser.add_argument("--sessions-held", type=int, default=10_000, help="sessions held open (N); 0 skips")
    parser.add_argument("--held-concurrency", type=int, default=64, help="connections opening them")
    parser.add_argument("--held-sample", type=int, default=500, help="held sessions stepped once each")
    parser.add_argument("--held-timeout", type=float, default=120.0, help="bound on opening / closing them")
    parser.add_argument("--ceiling-duration", type=float, default=3.0, help="seconds per ceiling level")
    parser.add_argument(
        "--peer-rounds",
        type=int,
        default=2,
        help="interleaved rounds of the gym, the bare Starlette floor and OpenEnv's own server side by "
        "side at every client level (0 skips them)",
    )
    parser.add_argument("--port", type=int, default=0, help="server port (0: a free one)")
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temporary directory")
    parser.add_argument("--write-docs", action="store_true", help=f"replace '## Sessions' in {DOCS}")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1,16 clients, 2 s, 500 held")
    parser.add_argument("--server-log", default=None, help="keep the server's log at this path")
    parser.add_argument(
        "--server-cmd",
        default=None,
        help="start the server with this command instead of `python -m gym_server serve`, for A/B "
        "experiments; it must serve on GYM_HOST:GYM_PORT and honour the other GYM_* variables",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="PATH",
        help="sample the server with py-spy during the episode levels (raw stacks to PATH) and print "
        "its hot spots; the numbers of such a run are not written to the docs",
    )
    args = parser.parse_args(argv)
    args.argv = argv
    if args.quick:
        args.clients, args.duration, args.warmup = args.clients or "1,16", 2.0, 0.5
        args.sessions_held, args.ceiling_duration, args.held_sample = min(args.sessions_held, 500), 1.0, 100
        args.peer_rounds = min(args.peer_rounds, 1)
    args.clients = [int(c) for c in str(args.clients or "1,16,256").split(",") if c.strip()]
    if args.profile and args.write_docs:
        parser.error("--profile perturbs the server; take the numbers for --write-docs from a plain run")
    if args.profile and not PySpy.available():
        parser.error("--profile needs py-spy (pip install py-spy)")
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 4096:
        parser.error("--clients takes levels between 1 and 4096")
    if not 1 <= args.steps <= 1000 or not 0 < args.duration <= 3600 or args.sessions_held < 0:
        parser.error("--steps 1..1000, --duration 0..3600 s, --sessions-held >= 0")
    if not 0 <= args.peer_rounds <= 10:
        parser.error("--peer-rounds 0..10")
    return args


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` stops us the same way Ctrl-C does
    pinned = args.pinned = (os.cpu_count() or 1) > LOADGEN_CORE and pin(0, LOADGEN_CORE)
    report = Report(args=args, machine=machine_description(), pinned=pinned)
    print_machine(report)
    with tempfile.TemporaryDirectory(prefix="gym-bench-") as workdir:
        args.workdir = workdir
        port = args.port or free_port()
        database_url = args.database_url or f"sqlite:///{workdir}/bench.db"
        env = gym_env(port, database_url, args.sessions_held + max(args.clients) + 100)
        log = Path(args.server_log) if args.server_log else Path(workdir) / "server.log"
        server = ManagedProcess(
            "gym-server",
            shlex.split(args.server_cmd)
            if args.server_cmd
            else [sys.executable, "-m", "gym_server", "serve"],
            env=env,
            cwd=Path(workdir),  # no stray .env or var/ picked up from the caller's directory
            log=log,
        )
        try:
            server.start(SERVER_CORE if pinned else None)
            run(lambda: benchmark(args, server, port, report))
        except (KeyboardInterrupt, asyncio.CancelledError):
            console.print("[yellow]interrupted; stopping the server[/]")
            return 130
        except RuntimeError as exc:
            console.print(f"[red]{exc}[/]")
            return 1
        finally:
            code = server.stop()
            if code not in (None, 0):
                console.print(f"[yellow]server exited with {code}; log tail:[/]\n{server.log_tail(15)}")
    report.load_end = " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    print_results(report)
    if report.side_by_side:
        print_side_by_side(report.side_by_side, console)
    if args.profile and Path(args.profile).exists():
        print_profile(Path(args.profile))
    if args.write_docs:
        write_docs(report)
        console.print(f"wrote the Sessions section of {DOCS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
