"""Server CPU per request of each kind of an episode (create, step, verify, close), the working tree
against a git ref: where an episode's CPU goes, measured so that load from other jobs barely moves it.

    python benchmarks/sessions_phases.py --against ec5d460
    python benchmarks/sessions_phases.py --against main --episodes 400 --rounds 3

Why this way: steps/s on a shared machine drifts by more than most regressions, and the episode-level
CPU of `sessions_against.py` says how much an episode costs but not which request costs it. Here one
client runs the episode's requests phase by phase on each server (every create of N episodes, then
every first step, ..., then every close), and the server's user + system CPU time (from
/proc/<pid>/task/<tid>/schedstat, nanoseconds, the event loop's thread apart from the others: the
store's writer, the loop-lag watchdog, asyncio's worker threads) is read before and after each phase.
CPU time counts what the server did, not how long it waited for the core, so it stays comparable under
load. Both servers run at once (the ref in a temporary `git
worktree`, as in `sessions_against.py`), both pinned to the server core, rounds alternating which goes
first. With one client every create and close commits alone: this is the price of acknowledging
each one after its commit when nothing groups the commits.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import HttpConnection, Response
from _sessions_report import console
from _sessions_system import HOST, LOADGEN_CORE, machine_description, pin
from _sessions_workload import COUNTER_TASKS, STEP_BODY, wait_ready
from rich.table import Table
from sessions_against import HEAD, Side, _git, _load1, _raise_interrupt, serve_both

PHASES = ("create", "step", "verify", "close")


@dataclass(slots=True)
class PhaseCpu:
    """CPU seconds of one phase on one server: the event loop's thread and all the others."""

    requests: int
    loop_s: float
    others_s: float


@dataclass(slots=True)
class Rounds:
    """Per request kind, one `PhaseCpu` per round (a round's eight step phases add up into one)."""

    phases: dict[str, list[PhaseCpu]] = field(default_factory=dict)
    round: int = 0

    def add(self, name: str, cpu: PhaseCpu) -> None:
        rounds = self.phases.setdefault(name, [])
        if len(rounds) <= self.round:
            rounds.append(cpu)
        else:
            last = rounds[self.round]
            rounds[self.round] = PhaseCpu(
                last.requests + cpu.requests, last.loop_s + cpu.loop_s, last.others_s + cpu.others_s
            )


def thread_cpu_seconds(pid: int) -> tuple[float, float]:
    """(main thread, every other thread) CPU seconds of process `pid`, from the scheduler's own
    nanosecond accounting (/proc/<pid>/task/<tid>/schedstat), not the 10 ms ticks of /proc/<pid>/stat."""
    main = others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            seconds = int((task / "schedstat").read_text().split()[0]) / 1e9
        except OSError:  # a thread that ended between the listing and the read
            continue
        if task.name == str(pid):
            main += seconds
        else:
            others += seconds
    return main, others


async def one_round(side: Side, args: argparse.Namespace, into: Rounds) -> None:
    conn = HttpConnection(HOST, side.port, timeout_s=30.0)
    await conn.connect()
    pid = side.server.pid

    async def phase(name: str, requests: Sequence[tuple[str, str, bytes | None, int]]) -> list[Response]:
        before = thread_cpu_seconds(pid)
        bodies = []
        for method, path, body, expect in requests:
            response = await conn.request(method, path, body)
            if response.status != expect:
                raise RuntimeError(f"{side.label}: {method} {path} answered {response.status}, not {expect}")
            bodies.append(response)
        after = thread_cpu_seconds(pid)
        into.add(name, PhaseCpu(len(requests), after[0] - before[0], after[1] - before[1]))
        return bodies

    try:
        creates = [
            (
                "POST",
                "/v1/sessions",
                f'{{"env":"counter","task_id":"counter-{i % COUNTER_TASKS:04d}"}}'.encode(),
                201,
            )
            for i in range(args.episodes)
        ]
        ids = [response.json()["session_id"] for response in await phase("create", creates)]
        for _ in range(args.steps):
            await phase("step", [("POST", f"/v1/sessions/{sid}/step", STEP_BODY, 200) for sid in ids])
        await phase("verify", [("POST", f"/v1/sessions/{sid}/verify", None, 200) for sid in ids])
        await phase("close", [("DELETE", f"/v1/sessions/{sid}", None, 204) for sid in ids])
        into.round += 1
    finally:
        await conn.close()


async def measure(sides: list[Side], args: argparse.Namespace, rounds: dict[str, Rounds]) -> None:
    for side in sides:
        await wait_ready(side.port, side.server, timeout_s=90.0)
    for number in range(args.rounds):
        for side in sides if number % 2 == 0 else sides[::-1]:
            await one_round(side, args, rounds.setdefault(side.label, Rounds()))
            console.print(f"round {number + 1}, {side.label}: done, load {_load1()}")


def _us(cpus: list[PhaseCpu], part: str) -> float:
    """Median over rounds of CPU µs per request (`loop`, `others` or `all`)."""

    def value(cpu: PhaseCpu) -> float:
        seconds = {"loop": cpu.loop_s, "others": cpu.others_s, "all": cpu.loop_s + cpu.others_s}[part]
        return seconds / cpu.requests * 1e6

    return statistics.median(value(cpu) for cpu in cpus)


def print_table(base: Rounds, head: Rounds, args: argparse.Namespace) -> None:
    table = Table(
        title=f"server CPU µs per request, {args.against} → {HEAD}: {args.rounds} round(s) of "
        f"{args.episodes} episodes, one client (medians over rounds)"
    )
    for column in ("request", "all threads", "event loop thread", "other threads", "ratio"):
        table.add_column(column, justify="right")
    episode = [0.0, 0.0]
    for name in PHASES:
        weight = args.steps if name == "step" else 1
        row = [
            [_us(rounds.phases[name], part) for rounds in (base, head)] for part in ("all", "loop", "others")
        ]
        episode = [episode[i] + weight * row[0][i] for i in range(2)]
        table.add_row(
            name,
            *(f"{before:,.0f} → {after:,.0f}" for before, after in row),
            f"{row[0][1] / row[0][0]:.2f}",
        )
    table.add_row(
        f"episode ({args.steps} steps)",
        f"{episode[0]:,.0f} → {episode[1]:,.0f}",
        "",
        "",
        f"{episode[1] / episode[0]:.2f}",
    )
    console.print(table)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--against", required=True, help="git ref to compare with (a commit, branch or tag)")
    parser.add_argument("--episodes", type=int, default=400, help="episodes per round (requests per phase)")
    parser.add_argument("--steps", type=int, default=8, help="steps per episode")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating which server goes first")
    parser.add_argument(
        "--database-url", default=None, help="one database for both (default: a SQLite file each)"
    )
    args = parser.parse_args(argv)
    if not 50 <= args.episodes <= 5000 or not 1 <= args.steps <= 100 or not 1 <= args.rounds <= 10:
        parser.error("--episodes 50..5000, --steps 1..100, --rounds 1..10")
    args.clients = [1]  # what `_side` sizes the servers' session limit by
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    pinned = pin(0, LOADGEN_CORE)
    machine = machine_description()
    console.print(
        f"{machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, {machine['date']}, "
        f"load {machine['load']}; head {machine['git']} (+ uncommitted changes), base {args.against} = "
        f"{_git('rev-parse', '--short', f'{args.against}^{{commit}}')}"
    )
    rounds: dict[str, Rounds] = {}
    sides = serve_both(args, "gym-phases-", pinned, lambda both: measure(both, args, rounds))
    if isinstance(sides, int):
        return sides
    print_table(rounds[args.against], rounds[HEAD], args)
    console.print(f"load average at the end: {' / '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
