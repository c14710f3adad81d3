"""Ray entry point benchmark: what the router's hop costs against a replica reached directly, and what a
second replica adds (issue 13's targets: overhead <= 10 %, two replicas >= 1.7x one).

`gym-server serve --ray --ray-address local` starts a one-node Ray cluster on this machine and its
replicas; each level runs C clients looping over `counter` episodes (create, K steps, close) for D
seconds, counting steps. Direct and through-the-entry-point levels of the same replica are interleaved,
round by round, so a change in the machine's load hits both. Nothing is pinned: the entry point, the
replicas and this load generator share the machine's cores, and the load average is printed with every
row because the machine may be shared. Needs the ray extra and a PostgreSQL (`--admin-url`; the run
uses a throwaway database).

    python benchmarks/ray_entry.py [--clients 16] [--duration 5] [--rounds 3] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _docs import replace_section
from _loadgen import HttpConnection, percentile, run
from _sessions_system import HOST, REPO, free_port, machine_description
from _sessions_workload import COUNTER_TASKS, STEP_BODY

LEVELS = ("direct", "entry-1 forwarded", "entry-1 followed", "entry-2 forwarded", "entry-2 followed")
DOCS = REPO / "docs" / "benchmarks.md"
SECTION = "## Ray entry point (`benchmarks/ray_entry.py`)"


@dataclass
class Level:
    target: str
    steps: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    load: str = ""

    @property
    def rate(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0


async def episodes(
    port: int, clients: int, duration_s: float, steps: int, target: str, *, follow: bool = False
) -> Level:
    """Rounds of: every client opens a session, then all step theirs `steps` times at once (timed),
    then all close. Only the stepping counts: creates and closes wait for PostgreSQL commits, which on a
    shared machine would drown the hop being measured. `follow`: step the replica the create's
    `x-gym-replica-url` names (as GymClient does), over one kept-alive connection per client and replica."""
    level = Level(target)
    connections = [HttpConnection(HOST, port, timeout_s=30.0) for _ in range(clients)]
    await asyncio.gather(*(c.connect() for c in connections))
    direct: list[dict[int, HttpConnection]] = [{} for _ in range(clients)]

    async def open_session(index: int, conn: HttpConnection) -> tuple[str, HttpConnection]:
        body = f'{{"env":"counter","task_id":"counter-{index % COUNTER_TASKS:04d}"}}'.encode()
        created = await conn.send(conn.render("POST", "/v1/sessions", body))
        if created.status != 201:
            raise SystemExit(f"create answered {created.status}: {created.body[:200]!r}")
        url = created.headers.get("x-gym-replica-url")
        if not follow or url is None:
            return str(created.json()["session_id"]), conn
        replica_port = int(url.rsplit(":", 1)[1])
        if replica_port not in direct[index]:
            direct[index][replica_port] = HttpConnection(HOST, replica_port, timeout_s=30.0)
            await direct[index][replica_port].connect()
        return str(created.json()["session_id"]), direct[index][replica_port]

    async def step_session(conn: HttpConnection, sid: str) -> None:
        step = conn.render("POST", f"/v1/sessions/{sid}/step", STEP_BODY)
        for _ in range(steps):
            began = time.perf_counter()
            answer = await conn.send(step)
            if answer.status != 200:
                level.errors += 1
                return
            level.latencies.append(time.perf_counter() - began)
            level.steps += 1

    deadline = time.perf_counter() + duration_s
    while time.perf_counter() < deadline:
        opened = await asyncio.gather(*(open_session(i, c) for i, c in enumerate(connections)))
        sids = [sid for sid, _ in opened]
        began = time.perf_counter()
        await asyncio.gather(*(step_session(c, sid) for sid, c in opened))
        level.seconds += time.perf_counter() - began
        await asyncio.gather(
            *(
                c.send(c.render("DELETE", f"/v1/sessions/{sid}"))
                for c, sid in zip(connections, sids, strict=True)
            )
        )
    await asyncio.gather(*(c.close() for c in connections), *(c.close() for d in direct for c in d.values()))
    level.load = load_average()
    return level


def load_average() -> str:
    with open("/proc/loadavg") as source:
        return " / ".join(source.read().split()[:3])


def replicas(port: int) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"http://{HOST}:{port}/v1/replicas", timeout=5) as answer:
        return list(json.loads(answer.read())["replicas"])


def start_gym(port: int, workers: int, database_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    argv = [
        sys.executable, "-m", "gym_server", "serve", "--ray", "--ray-address", "local",
        "--host", HOST, "--port", str(port),
        "--database-url", database_url, "--sandbox-backend", "unsafe-no-sandbox", "--log-level", "warning",
        "--workers", str(workers), "--replica-cpus", "0",
    ]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the gym exited ({process.returncode}); see {log}")
        try:
            if len(replicas(port)) == workers:
                return process
        except OSError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise SystemExit(f"{workers} replicas not up within 240 s; see {log}")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(120)


def row(level: Level) -> str:
    p50 = percentile(sorted(level.latencies), 50) * 1000 if level.latencies else 0.0
    return f"| {level.target} | {level.rate:,.0f} | {p50:.2f} | {level.errors} | {level.load} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--steps", type=int, default=30, help="steps per episode (counter allows 32 turns)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--write-docs", action="store_true", help=f"replace '{SECTION}' in {DOCS}")
    args = parser.parse_args()
    database = f"gym_ray_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"{database}.log"
    machine = machine_description()
    levels: dict[str, list[Level]] = {name: [] for name in LEVELS}
    try:
        port = free_port()
        gym = start_gym(port, 1, url, log)
        try:
            replica_port = int(str(replicas(port)[0]["address"]).rsplit(":", 1)[1])
            for _ in range(args.rounds):
                for name, target, follow in (
                    ("direct", replica_port, False),
                    ("entry-1 forwarded", port, False),
                    ("entry-1 followed", port, True),
                ):
                    levels[name].append(
                        run(
                            partial(
                                episodes, target, args.clients, args.duration, args.steps, name, follow=follow
                            )
                        )
                    )
        finally:
            stop(gym)
        gym = start_gym(port, 2, url, log)
        try:
            for _ in range(args.rounds):
                for name, follow in (("entry-2 forwarded", False), ("entry-2 followed", True)):
                    levels[name].append(
                        run(
                            partial(
                                episodes, port, args.clients, args.duration, args.steps, name, follow=follow
                            )
                        )
                    )
        finally:
            stop(gym)
    finally:
        with psycopg.connect(args.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    report = render(machine, levels, args)
    print(report)
    if args.write_docs:
        write_docs(report)


def render(machine: dict[str, str], levels: dict[str, list[Level]], args: argparse.Namespace) -> str:
    median = {name: statistics.median(level.rate for level in runs) for name, runs in levels.items()}
    overhead = 1 - median["entry-1 followed"] / median["direct"]
    forwarding = 1 - median["entry-1 forwarded"] / median["direct"]
    scaling = median["entry-2 followed"] / median["entry-1 followed"]
    lines = [
        SECTION,
        "",
        f"{machine['date']}, git {machine['git']}: {machine['cpu']}, {machine['cores']} cores, "
        f"{machine['ram']}, Python {machine['python']}; load average at start {machine['load']}. The "
        "machine was shared with other engineers' builds and tests during the run, so the numbers are "
        "noisy: each row gives the load average (1 / 5 / 15 min) right after it. Nothing pinned: the "
        "entry point, the replicas, the Ray node and the load generator share the cores.",
        "",
        f"{args.clients} clients, each stepping its own counter session {args.steps} times per round, all at "
        f"once; {args.duration:g} s per level, {args.rounds} rounds (the levels of one replica count "
        "interleaved, then those of two); PostgreSQL store. steps/s counts the stepping only (creates and "
        "closes, which wait for PostgreSQL commits, run between the timed windows). `direct`: the "
        "replica's own port; `forwarded`: every request through the entry point; `followed`: created "
        "through the entry point, stepped at the replica its `x-gym-replica-url` names (what GymClient "
        "does; the default `direct_sessions`).",
        "",
        "| target | steps/s | step p50 ms | errors | load average |",
        "|---|---|---|---|---|",
        *(row(level) for name in levels for level in levels[name]),
        "",
        "Medians (steps/s): " + ", ".join(f"{name} {value:,.0f}" for name, value in median.items()) + ".",
        "",
        f"- Entry point overhead against the replica reached directly, sessions followed to their "
        f"replica (the default): {overhead:.0%} (target <= 10 %: {'met' if overhead <= 0.10 else 'not met'}"
        f"); every step forwarded (`--no-direct-sessions`): {forwarding:.0%}.",
        f"- Two replicas against one, both followed from the entry point: {scaling:.2f}x (target >= 1.7x: "
        f"{'met' if scaling >= 1.7 else 'not met'}; the load generator and both replicas share the two "
        "cores, so this only shows the target on a machine with a core per replica plus one for clients).",
        "",
    ]
    return "\n".join(lines)


def write_docs(report: str) -> None:
    replace_section(DOCS, SECTION, report)


if __name__ == "__main__":
    main()
