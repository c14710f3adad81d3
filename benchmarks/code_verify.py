"""Code verification throughput: HumanEval programs scored through `POST /v1/verify` (issue 13's targets:
>= 50 verifications/s on the two cores with bubblewrap, >= 25 with Docker).

For each sandbox backend a real `gym-server serve` (SQLite store in a temporary directory) is started;
C clients (1 and 8) each loop for D seconds over HumanEval tasks, posting the task's canonical solution as
the completion, so every call runs the full harness (the task's tests against the program) in a warm
sandbox of the server's pool. Nothing is pinned: server, sandboxes and this load generator share the
cores, and the load average is printed with every row because the machine may be shared.

    python benchmarks/code_verify.py [--backends bubblewrap,docker] [--pool-sizes default,8] [--duration 10]
        [--rounds 2] [--quick] [--write-docs]

`--profile [--baseline REF]` instead splits one verification's CPU into its steps, in one warm sandbox
of each backend without a server (see `profile`); `--baseline` adds the harness as it was at git REF.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _docs import replace_section
from _loadgen import HttpConnection, percentile, run
from _sessions_system import CLK_TCK, HOST, REPO, ManagedProcess, free_port, machine_description

DOCS = REPO / "docs" / "benchmarks.md"
SECTION = "## Code verification (`benchmarks/code_verify.py`)"
TASKS = REPO / "datasets" / "gym_datasets" / "humaneval" / "test.jsonl"
TARGETS = {"bubblewrap": 50.0, "docker": 25.0}
KEPT = "### Where the CPU goes"  # the analysis below the table, which --write-docs keeps


@dataclass
class Level:
    backend: str
    pool: str
    clients: int
    calls: int = 0
    passed: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    load: str = ""
    cpu_s: float = 0.0  # the server's CPU and its reaped children's (bubblewrap sandboxes; not Docker's)

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0


def bodies() -> list[bytes]:
    """One /v1/verify body per HumanEval task: its canonical solution as the model's answer."""
    out = []
    for line in TASKS.read_text().splitlines():
        task = json.loads(line)
        answer = task["answer"]
        completion = f"```python\n{answer['prompt']}{answer['canonical_solution']}\n```"
        out.append(json.dumps({"env": "humaneval", "task_id": task["id"], "completion": completion}).encode())
    return out


def tree_cpu_seconds(pid: int) -> float:
    """user + system CPU of a process and of its children it has waited for (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / CLK_TCK


def load_average() -> str:
    with open("/proc/loadavg") as source:
        return " / ".join(source.read().split()[:3])


async def level(
    port: int, pid: int, backend: str, pool: str, clients: int, duration_s: float, work: list[bytes]
) -> Level:
    result = Level(backend, pool, clients)
    cpu_before = tree_cpu_seconds(pid)
    connections = [HttpConnection(HOST, port, timeout_s=60.0) for _ in range(clients)]
    await asyncio.gather(*(c.connect() for c in connections))
    deadline = time.perf_counter() + duration_s

    async def client(index: int, conn: HttpConnection) -> None:
        position = index * 17
        while time.perf_counter() < deadline:
            body = work[position % len(work)]
            position += 1
            began = time.perf_counter()
            answer = await conn.send(conn.render("POST", "/v1/verify", body))
            result.latencies.append(time.perf_counter() - began)
            result.calls += 1
            if answer.status != 200:
                result.errors += 1
            elif answer.json().get("reward") == 1.0:
                result.passed += 1

    began = time.perf_counter()
    await asyncio.gather(*(client(i, c) for i, c in enumerate(connections)))
    result.seconds = time.perf_counter() - began
    await asyncio.gather(*(c.close() for c in connections))
    result.load = load_average()
    result.cpu_s = tree_cpu_seconds(pid) - cpu_before
    return result


def start_gym(backend: str, pool: str, folder: Path) -> tuple[ManagedProcess, int]:
    port = free_port()
    argv = [
        sys.executable, "-m", "gym_server", "serve", "--host", HOST, "--port", str(port),
        "--database-url", f"sqlite:///{folder / 'gym.db'}", "--sandbox-backend", backend,
        "--log-level", "warning",
    ]  # fmt: skip
    env = {**os.environ, "GYM_AUTH__MODE": "off"}
    if pool != "default":
        env["GYM_SANDBOX__POOL_SIZE"] = pool
    gym = ManagedProcess(f"gym-{backend}", argv, env=env, cwd=folder, log=folder / f"{backend}.log")
    gym.start(None)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not gym.alive():
            raise SystemExit(f"the gym exited; log:\n{gym.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return gym, port
        except OSError:
            pass
        time.sleep(0.3)
    gym.stop()
    raise SystemExit(f"the gym did not get ready within 120 s; log:\n{gym.log_tail()}")


def row(level: Level) -> str:
    lat = sorted(level.latencies)
    p50, p99 = (percentile(lat, 50) * 1000, percentile(lat, 99) * 1000) if lat else (0.0, 0.0)
    cpu_ms = level.cpu_s / level.calls * 1000 if level.calls else 0.0
    return (
        f"| {level.backend} | {level.pool} | {level.clients} | {level.calls} | {level.passed} | "
        f"{level.errors} | "
        f"{p50:,.0f} | {p99:,.0f} | {level.rate:.1f} | {cpu_ms:.0f} | {level.load} |"
    )


def render(machine: dict[str, str], levels: list[Level], args: argparse.Namespace) -> str:
    lines = [
        SECTION,
        "",
        f"{machine['date']}, git {machine['git']}: {machine['cpu']}, {machine['cores']} cores, "
        f"{machine['ram']}, Python {machine['python']}; load average at start {machine['load']}. The "
        "machine was shared with other engineers' builds and tests, so the numbers are noisy: each row "
        "gives the load average (1 / 5 / 15 min) right after it. Nothing pinned.",
        "",
        f"`POST /v1/verify` of HumanEval tasks with their canonical solutions (every call runs the task's "
        f"tests in a warm sandbox); C clients, one request in flight each, {args.duration:g} s per level, "
        f"{args.rounds} round(s), levels interleaved (one server per pool size, all up at once); "
        "`sandbox.max_running` default (4 per core); `pool size`: `sandbox.pool_size`, the warm sandboxes "
        "kept idle (default: the setting's default). `passed`: reward 1.0. `CPU ms/verification`: the "
        "server's CPU time plus "
        "that of the sandbox processes it reaped, per call (bubblewrap sandboxes are the server's children; "
        "Docker's run under containerd and are not counted); 2 cores / that is the most this machine "
        "could do with nothing else running.",
        "",
        "| backend | pool size | clients | calls | passed | errors | p50 ms | p99 ms | verifications/s | "
        "CPU ms/verification | load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(row(level) for level in levels),
        "",
    ]
    for backend, target in TARGETS.items():
        for pool in args.pool_sizes:
            rates = [
                lvl.rate
                for lvl in levels
                if (lvl.backend, lvl.pool, lvl.clients) == (backend, pool, max(args.clients))
            ]
            if rates:
                best = statistics.median(rates)
                verdict = "met" if best >= target else "not met"
                lines.append(
                    f"- {backend}, pool size {pool}, {max(args.clients)} clients: {best:.1f}/s "
                    f"(target >= {target:g}/s: {verdict})."
                )
    lines.append("")
    return "\n".join(lines)


def engine_cpu_seconds() -> float:
    """CPU of the Docker engine's processes and of the children they reaped (runc, exec'd programs)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        if name in ("dockerd", "containerd") or name.startswith("containerd-shim"):
            total += sum(int(value) for value in text.rsplit(")", 1)[1].split()[11:15])
    return total / CLK_TCK


def verify_request(task: dict[str, Any]) -> dict[str, Any]:
    """The harness request that the humaneval environment makes for a task's canonical solution."""
    return {
        "key": "0" * 64,
        "candidate": f"{task['prompt']}{task['canonical_solution']}",
        "setup": f"{task['prompt']}\n{task['test']}",
        "tests": ["check(candidate)"],
        "io_cases": [],
        "entry_point": task["entry_point"],
        "timeout_s": 20.0,
        "call_timeout_s": 10.0,
    }


async def profile_backend(
    name: str, baseline: tuple[str, str] | None, repeats: int
) -> list[tuple[str, float, float]]:
    """(step, CPU ms, wall ms) per step, each the mean of `repeats` runs in one warm sandbox.

    The HumanEval rows cycle through the tasks in order (a seventh of them import `typing`, which
    costs the harness and the worker about 10 ms each). CPU is this process's and its reaped
    children's (bubblewrap sandboxes are our children) plus, for Docker, the engine's (dockerd,
    containerd and the shims, which reap the exec'd processes): other Docker users on the machine
    count too, so Docker's rows are an upper bound.
    """
    from gym_server.sandbox.bubblewrap import BubblewrapBackend
    from gym_server.sandbox.docker import DockerBackend
    from gym_server.sandbox.protocol import Limits
    from gym_verifiers.code import HARNESS_ARGV, encode_request

    requests = [verify_request(json.loads(line)["answer"]) for line in TASKS.read_text().splitlines()]
    empty = {**requests[0], "setup": "", "tests": []}
    steps: list[tuple[str, list[str], list[bytes | None]]] = [
        ("exec `true`", ["true"], [None]),
        ("exec `python3 -I -S -c pass`", ["python3", "-I", "-S", "-c", "pass"], [None]),
        ("exec the harness, nothing to run", list(HARNESS_ARGV), [encode_request(empty)]),
        ("exec the harness, one HumanEval task", list(HARNESS_ARGV), [encode_request(r) for r in requests]),
    ]
    if baseline is not None:
        ref, old = baseline
        encode = (lambda r: json.dumps(r).encode()) if "json.loads(sys.stdin" in old else encode_request
        label = f"exec the harness at {ref}, one HumanEval task"
        steps.append((label, ["python3", "-I", "-S", "-c", old], [encode(r) for r in requests]))
    backend = (
        BubblewrapBackend(server_name="profile")
        if name == "bubblewrap"
        else DockerBackend(server_name="profile")
    )
    rows: list[tuple[str, float, float]] = []

    def cpu() -> float:
        times = os.times()
        own = times.user + times.system + times.children_user + times.children_system
        return own + (engine_cpu_seconds() if name == "docker" else 0.0)

    try:
        sandbox = await backend.start(Limits(timeout_s=30))
        try:
            for label, argv, stdins in steps:
                await sandbox.exec(argv, stdin=stdins[0])
                cpu_before, began = cpu(), time.perf_counter()
                for index in range(repeats):
                    result = await sandbox.exec(argv, stdin=stdins[index % len(stdins)])
                    if result.exit_code != 0:
                        raise SystemExit(f"{label} failed: {result.stderr[-300:]!r}")
                wall = time.perf_counter() - began
                rows.append((label, (cpu() - cpu_before) / repeats * 1000, wall / repeats * 1000))
            cpu_before, began = cpu(), time.perf_counter()
            for _ in range(repeats):
                await sandbox.scrub()
            rows.append(("scrub (the pool's, after every loan)", (cpu() - cpu_before) / repeats * 1000,
                         (time.perf_counter() - began) / repeats * 1000))  # fmt: skip
        finally:
            await sandbox.close()
    finally:
        await backend.aclose()
    return rows


def profile(backends: list[str], baseline: str | None, repeats: int) -> str:
    old = None
    if baseline:
        # The harness moved with the verifiers: under gym_server/ since issue 24, at the top level before.
        for prefix in ("gym_server/", ""):
            shown = subprocess.run(
                ["git", "-C", str(REPO), "show", f"{baseline}:{prefix}verifiers/_code_harness.py"],
                capture_output=True, text=True,
            )  # fmt: skip
            if shown.returncode == 0:
                break
        shown.check_returncode()
        source = shown.stdout
        old = (baseline, source)
    lines = [
        f"Profile ({load_average()} load average at start; {repeats} runs per step, one warm sandbox, no "
        "server; CPU: this process and its reaped children, plus the Docker engine's processes for Docker):",
        "",
        "| backend | step | CPU ms | wall ms |",
        "|---|---|---|---|",
    ]
    for name in backends:
        for label, cpu_ms, wall_ms in run(partial(profile_backend, name, old, repeats)):
            lines.append(f"| {name} | {label} | {cpu_ms:.1f} | {wall_ms:.1f} |")
            print(lines[-1], flush=True)
    lines.append(f"\nload average at the end: {load_average()}")
    return "\n".join(lines)


def write_docs(report: str) -> None:
    """Replace the measured part of the section; its hand-written analysis (from `KEPT` on) stays."""
    text = DOCS.read_text(encoding="utf-8")
    kept = ""
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        section = text[start : end if end >= 0 else len(text)]
        if KEPT in section:
            kept = "\n" + section[section.index(KEPT) :].rstrip("\n") + "\n\n"
    replace_section(DOCS, SECTION, report + kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backends", default="bubblewrap,docker")
    parser.add_argument("--clients", type=lambda text: [int(c) for c in text.split(",")], default=[1, 8])
    parser.add_argument(
        "--pool-sizes",
        type=lambda text: text.split(","),
        default=["default"],
        help="sandbox.pool_size of each server, e.g. default,8",
    )
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="3 s per level, one round")
    parser.add_argument("--write-docs", action="store_true", help=f"replace '{SECTION}' in {DOCS}")
    parser.add_argument("--profile", action="store_true", help="CPU per step of one verification")
    parser.add_argument("--baseline", help="with --profile: also the harness at this git ref")
    parser.add_argument("--repeats", type=int, default=30, help="with --profile: runs per step")
    args = parser.parse_args()
    if args.profile:
        print(profile(args.backends.split(","), args.baseline, args.repeats))
        return
    if args.quick:
        args.duration, args.rounds = 3.0, 1
    machine = machine_description()
    work = bodies()
    levels: list[Level] = []
    with tempfile.TemporaryDirectory(prefix="gym-code-verify-") as tmp:
        for backend in args.backends.split(","):
            gyms: dict[str, tuple[ManagedProcess, int]] = {}
            try:
                for pool in args.pool_sizes:
                    folder = Path(tmp) / f"{backend}-{pool}"
                    folder.mkdir()
                    gyms[pool] = start_gym(backend, pool, folder)
                for pool, (gym, port) in gyms.items():  # warm-up: the pool fills
                    run(partial(level, port, gym.pid, backend, pool, 1, 1.0, work))
                for _ in range(args.rounds):
                    for clients in args.clients:
                        for pool, (gym, port) in gyms.items():
                            one = partial(level, port, gym.pid, backend, pool, clients, args.duration, work)
                            levels.append(run(one))
                            print(row(levels[-1]), flush=True)
            finally:
                for gym, _ in gyms.values():
                    gym.stop()
    report = render(machine, levels, args)
    print(report)
    if args.write_docs:
        write_docs(report)


if __name__ == "__main__":
    main()
