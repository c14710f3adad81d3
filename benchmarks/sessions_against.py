"""The working tree against a git ref, side by side: steps/s and step p50 per concurrency, and their ratio.

Run it when performance-relevant code changes (the session manager, the store's writer, the API's
middleware, the serve path), before the change lands:

    python benchmarks/sessions_against.py --against main
    python benchmarks/sessions_against.py --against ec5d460 --clients 1,16 --rounds 3

Why this way: on a shared machine the rate drifts by 20 % within minutes, more than most regressions,
so a number measured yesterday says nothing about today's change. Here both servers run at once, each
from its own source tree (the ref checked out in a temporary `git worktree`, run with `PYTHONPATH`
pointing at it; the same interpreter and packages for both), each on its own SQLite file, both pinned
to the server core with this load generator on the other core. Every round measures every concurrency
on both servers back to back, alternating which goes first (ABBA), so drift touches both alike; the
table gives each round's rates, the ratio of the medians, and the load average when each level ended.
It also gives the server's CPU time per request (from /proc, over the measured window): unlike steps/s,
it barely moves when other processes take the core, so on a busy machine it is the steadier comparison.
A run killed with SIGKILL leaves its worktree registered: `git worktree prune` forgets it.
The workload is `sessions.py`'s: C clients each looping over episodes of the `counter` environment
(create, K steps, verify, close) on one keep-alive connection.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import run
from _sessions_report import console, fmt_ms
from _sessions_system import (
    LOADGEN_CORE,
    REPO,
    SERVER_CORE,
    ManagedProcess,
    free_port,
    gym_env,
    machine_description,
    pin,
)
from _sessions_workload import LevelResult, run_level, wait_ready
from rich.table import Table

HEAD = "working tree"


@dataclass(slots=True)
class Side:
    """One server under test: its label, its source tree and its process."""

    label: str
    tree: Path
    port: int
    server: ManagedProcess
    levels: dict[int, list[LevelResult]] = field(default_factory=dict)


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def checked_out(ref: str, parent: Path) -> Iterator[Path]:
    """`ref` in a detached temporary worktree, removed again on exit (also on error or Ctrl-C)."""
    tree = parent / "base"
    _git("worktree", "add", "--detach", "--quiet", str(tree), ref)
    try:
        yield tree
    finally:
        _git("worktree", "remove", "--force", str(tree))


def _side(label: str, tree: Path, workdir: Path, args: argparse.Namespace) -> Side:
    port = free_port()
    home = workdir / label.replace(" ", "-")
    home.mkdir()
    env = gym_env(port, args.database_url or f"sqlite:///{home}/bench.db", max(args.clients) + 100)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "gym_server", "serve"]
    server = ManagedProcess(label, argv, env=env, cwd=home, log=home / "server.log")
    return Side(label, tree, port, server)


def _load1() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


async def interleave(sides: list[Side], args: argparse.Namespace, loads: dict[int, list[str]]) -> None:
    for side in sides:
        await wait_ready(side.port, side.server, timeout_s=90.0)
        console.print(f"{side.label}: pid {side.server.pid} on port {side.port} ({side.tree})")
    for round_ in range(args.rounds):
        order = sides if round_ % 2 == 0 else sides[::-1]
        for clients in args.clients:
            for side in order:
                level = await run_level(side.port, side.server, clients, args)
                if not side.server.alive():
                    raise RuntimeError(f"{side.label} died at {clients} clients:\n{side.server.log_tail()}")
                side.levels.setdefault(clients, []).append(level)
                loads.setdefault(clients, []).append(_load1())
                console.print(
                    f"round {round_ + 1}, {clients:>4} clients, {side.label}: "
                    f"{level.steps / level.seconds:,.0f} steps/s, step p50 {fmt_ms(level.p('step', 50))} ms, "
                    f"errors {sum(level.errors.values())}"
                )


def _rates(levels: list[LevelResult]) -> list[float]:
    return [level.steps / level.seconds for level in levels]


def _us_per_episode(level: LevelResult, steps: int) -> float:
    """Server CPU per episode of create, `steps` steps, verify and close: the cost a training run pays,
    counting the create and close an episode's steps are amortised over."""
    episodes = level.steps / steps
    return level.server_cpu * level.seconds / episodes * 1e6 if episodes else float("nan")


def print_table(base: Side, head: Side, args: argparse.Namespace, loads: dict[int, list[str]]) -> None:
    table = Table(
        title=f"{HEAD} against {args.against}: {args.rounds} interleaved round(s) of {args.duration:g} s, "
        f"episodes of create, {args.steps} steps, verify, close"
    )
    for column in ("clients", f"{args.against} steps/s", f"{HEAD} steps/s", "ratio (medians)"):
        table.add_column(column, justify="right")
    table.add_column(f"step p50 {args.against} → {HEAD}", justify="right")
    table.add_column("server CPU µs/request", justify="right")
    table.add_column("CPU ratio", justify="right")
    table.add_column(f"server CPU µs/episode ({args.steps} steps)", justify="right")
    table.add_column("load 1 min", justify="right")
    table.add_column("errors", justify="right")
    for clients in args.clients:
        before, after = base.levels[clients], head.levels[clients]
        ratio = statistics.median(_rates(after)) / statistics.median(_rates(before))
        p50 = [fmt_ms(statistics.median(lv.p("step", 50) for lv in levels)) for levels in (before, after)]
        cpu = [statistics.median(lv.server_us_per_request for lv in levels) for levels in (before, after)]
        episode = [
            statistics.median(_us_per_episode(lv, args.steps) for lv in levels) for levels in (before, after)
        ]
        table.add_row(
            str(clients),
            ", ".join(f"{rate:,.0f}" for rate in _rates(before)),
            ", ".join(f"{rate:,.0f}" for rate in _rates(after)),
            f"[bold]{ratio:.2f}[/]",
            f"{p50[0]} → {p50[1]} ms",
            f"{cpu[0]:,.0f} → {cpu[1]:,.0f}",
            f"{cpu[1] / cpu[0]:.2f}",
            f"{episode[0]:,.0f} → {episode[1]:,.0f} ({episode[1] / episode[0]:.2f})",
            "-".join(sorted({min(loads[clients], key=float), max(loads[clients], key=float)}, key=float)),
            str(sum(sum(level.errors.values()) for level in before + after)),
        )
    console.print(table)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--against", required=True, help="git ref to compare with (a commit, branch or tag)")
    parser.add_argument("--clients", default="1,16,256", help="comma-separated concurrency levels")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (ABBA order)")
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per level and server")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each level")
    parser.add_argument("--steps", type=int, default=8, help="steps per episode")
    parser.add_argument(
        "--database-url", default=None, help="one database for both servers (default: a SQLite file each)"
    )
    args = parser.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",") if c.strip()]
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 4096:
        parser.error("--clients takes levels between 1 and 4096")
    if not 1 <= args.rounds <= 10 or not 0 < args.duration <= 600 or not 1 <= args.steps <= 1000:
        parser.error("--rounds 1..10, --duration 0..600 s, --steps 1..1000")
    return args


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve_both(
    args: argparse.Namespace,
    prefix: str,
    pinned: bool,
    work: Callable[[list[Side]], Coroutine[Any, Any, None]],
) -> tuple[Side, Side] | int:
    """`args.against` checked out beside the working tree, both servers started (on the server core when
    `pinned`), `work` run on the two sides, the servers stopped: the sides, or the exit status to return
    (130 interrupted, 1 a server that failed). `sessions_phases.py` measures through it too."""
    with (
        tempfile.TemporaryDirectory(prefix=prefix) as tmp,
        checked_out(args.against, Path(tmp)) as tree,
    ):
        base, head = _side(args.against, tree, Path(tmp), args), _side(HEAD, REPO, Path(tmp), args)
        try:
            for side in (base, head):
                side.server.start(SERVER_CORE if pinned else None)
            run(lambda: work([base, head]))
        except KeyboardInterrupt:
            console.print("[yellow]interrupted; stopping the servers[/]")
            return 130
        except RuntimeError as exc:
            console.print(f"[red]{exc}[/]")
            return 1
        finally:
            for side in (base, head):
                side.server.stop()
    return base, head


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` stops the servers and removes the worktree
    pinned = (os.cpu_count() or 1) > LOADGEN_CORE and pin(0, LOADGEN_CORE)
    machine = machine_description()
    commit = _git("rev-parse", "--short", f"{args.against}^{{commit}}")
    placement = f"server on core {SERVER_CORE}, load generator on {LOADGEN_CORE}" if pinned else "unpinned"
    console.print(
        f"{machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, {machine['date']}, "
        f"load {machine['load']}; head {machine['git']} (+ uncommitted changes), "
        f"base {args.against} = {commit}; {placement}"
    )
    loads: dict[int, list[str]] = {}
    sides = serve_both(args, "gym-against-", pinned, lambda both: interleave(both, args, loads))
    if isinstance(sides, int):
        return sides
    base, head = sides
    print_table(base, head, args, loads)
    console.print(f"load average at the end: {' / '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
