"""Sandbox benchmark: cold start, warm exec latency, throughput under concurrency, and leaks under faults.

For each backend that works here (bubblewrap, Docker):

* **cold start**: `backend.start()` of a sandbox, then the same plus a first `python3 -c pass`;
* **warm exec**: `python3 -c pass` (and `true`) in one started sandbox, p50 / p99;
* **throughput**: execs per second of `python3 -c pass` with 1, 8 and 32 concurrent callers, each on
  its own sandbox (execs on one sandbox are serialized by design);
* **faults**: N runs through a warm pool where a share of the runs misbehave (time out, get SIGKILLed,
  leave background processes, fork bomb, fill memory) and, on Docker, containers are removed from
  outside mid-run; afterwards the backend is closed and the host is searched for anything left:
  processes of sandbox uids, labelled containers, mounts, cgroups.

It also measures the "warm interpreter" alternative for the local backend: a Python process kept alive
inside one bubblewrap sandbox that forks a child per snippet, timed from the host over a pipe.
Run `python benchmarks/sandbox.py --quick` for a smoke run; `--write-docs` writes
docs/benchmarks-sandbox.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import docker
from rich.console import Console
from rich.table import Table

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox._host import orphan_reaper
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.docker import LABEL_SERVER, DockerBackend
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import Limits, SandboxBackend

console = Console()
PY = ["python3", "-c", "pass"]
LIMITS = Limits(timeout_s=10)
FAULTS: list[tuple[str, list[str] | str, float]] = [
    ("timeout", "sleep 30", 0.3),
    ("sigkill", ["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], 5),
    ("background", "setsid sleep 60 & sleep 60 & echo started", 5),
    (
        "fork bomb",
        ["python3", "-c", "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"],
        0.5,
    ),
    ("memory", ["python3", "-c", "b = []\nwhile True: b.append(bytearray(8 << 20))"], 5),
]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


async def timed(fn: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - started)
    return samples


async def cold_start(backend: SandboxBackend, n: int) -> dict[str, float]:
    starts, firsts = [], []
    for _ in range(n):
        began = time.perf_counter()
        box = await backend.start(LIMITS)
        started = time.perf_counter()
        await box.exec(PY)
        firsts.append(time.perf_counter() - began)
        starts.append(started - began)
        await box.close()
    return {"start_p50": pct(starts, 0.5), "start_p99": pct(starts, 0.99), "first_exec_p50": pct(firsts, 0.5)}


async def warm_exec(backend: SandboxBackend, n: int) -> dict[str, float]:
    box = await backend.start(LIMITS)
    try:
        await box.exec(PY)
        python = await timed(lambda: box.exec(PY), n)
        true = await timed(lambda: box.exec(["true"]), n)
    finally:
        await box.close()
    return {"py_p50": pct(python, 0.5), "py_p99": pct(python, 0.99), "true_p50": pct(true, 0.5)}


async def throughput(backend: SandboxBackend, concurrency: int, seconds: float) -> float:
    boxes = await asyncio.gather(*(backend.start(LIMITS) for _ in range(concurrency)))
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop(box: Any) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            result = await box.exec(PY)
            done += result.ok

    try:
        began = time.perf_counter()
        await asyncio.gather(*(loop(box) for box in boxes))
        return done / (time.perf_counter() - began)
    finally:
        for box in boxes:
            await box.close()


def _stop_engine() -> list[bytes]:
    """SIGTERM the local dockerd (through its pid file), wait for it to exit; returns its argv."""
    pid = int(Path("/var/run/docker.pid").read_text())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    os.kill(pid, signal.SIGTERM)
    for _ in range(400):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.05)
    return argv


def _start_engine(argv: list[bytes]) -> None:
    with open("/var/log/gym-dockerd.log", "ab") as log:
        subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    for _ in range(240):
        with contextlib.suppress(Exception):
            docker.from_env().ping()  # from_env itself fails while the engine is still starting
            return
        time.sleep(0.25)


async def restart_engine(pause_s: float) -> None:
    """Stop the local dockerd, wait `pause_s`, start it again with the same command line."""
    argv = await asyncio.to_thread(_stop_engine)
    await asyncio.sleep(pause_s)
    await asyncio.to_thread(_start_engine, argv)


async def faults(
    backend: SandboxBackend, runs: int, fault_every: int, engine_restart: bool
) -> dict[str, Any]:
    pool = SandboxPool(backend, size=4, limits=Limits(timeout_s=5, memory_mb=128, pids=32), max_uses=200)
    await pool.start()
    counts: dict[str, int] = {"ok": 0, "errors": 0}
    sem = asyncio.Semaphore(8)

    restarts: list[asyncio.Task[None]] = []

    async def one(index: int) -> None:
        if engine_restart and index == runs // 3 and isinstance(backend, DockerBackend):
            # Its own task: the engine comes back even if this run's task is cancelled.
            restarts.append(asyncio.create_task(restart_engine(2.0)))
            counts["engine restarts"] = 1
            return
        async with sem:
            if index % fault_every:
                command: list[str] | str = PY
                name, limit = "ok", 5.0
            else:
                name, command, limit = FAULTS[(index // fault_every) % len(FAULTS)]
            try:
                async with pool.acquire() as box:
                    if isinstance(backend, DockerBackend) and index % (fault_every * 7) == 3:
                        # A container killed from outside while its run is in flight.
                        run = asyncio.create_task(box.exec("sleep 5", timeout=limit))
                        await asyncio.sleep(0.05)
                        container = getattr(box, "container_id", "")
                        with contextlib.suppress(Exception):  # the engine may be down right now
                            await backend.submit(backend.api.remove_container, container, force=True)
                        await run
                        name = "container removed"
                    else:
                        await box.exec(command, timeout=limit)
                counts[name] = counts.get(name, 0) + 1
            except SandboxUnavailable:
                counts["errors"] += 1

    began = time.perf_counter()
    try:
        outcomes = await asyncio.gather(*(one(i) for i in range(runs)), return_exceptions=True)
    finally:
        for restart in restarts:
            await restart
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            counts[f"unexpected {type(outcome).__name__}"] = (
                counts.get(f"unexpected {type(outcome).__name__}", 0) + 1
            )
    elapsed = time.perf_counter() - began
    await pool.aclose()
    return {"runs": runs, "seconds": elapsed, "counts": counts}


def leftovers(backend: SandboxBackend) -> list[str]:
    """What the backend left behind once closed; the Docker engine is asked through a client of our own
    because `aclose()` has already closed the backend's."""
    found: list[str] = []
    if isinstance(backend, DockerBackend):
        import docker

        client = docker.from_env(timeout=30)
        try:
            containers = client.api.containers(
                all=True, filters={"label": f"{LABEL_SERVER}={backend.server_name}"}
            )
        finally:
            client.close()
        found += [f"container {c['Id'][:12]}" for c in containers]
    if isinstance(backend, BubblewrapBackend):
        low, high = backend.UID_BASE, backend.UID_BASE + backend.UID_SPAN
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    uid = os.stat(f"/proc/{entry}").st_uid
                except OSError:
                    continue
                if low <= uid < high:
                    found.append(f"process {entry} (uid {uid})")
        if backend.instance_dir.exists():
            found.append(f"folder {backend.instance_dir}")
        if str(backend.instance_dir) in Path("/proc/self/mounts").read_text():
            found.append("mounts")
        for parent in Path("/sys/fs/cgroup").glob("*/**/gym-sandbox"):
            found += [f"cgroup {p}" for p in parent.iterdir() if p.name.startswith(backend.instance)]
    return found


WARM_SERVER = r"""
import os, sys
rd, wr = sys.stdin.buffer, sys.stdout.buffer
for line in rd:
    code = line.decode()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r); os.dup2(w, 1)
        exec(compile(code, "<cell>", "exec"), {"__name__": "__main__"})
        os._exit(0)
    os.close(w)
    out = os.read(r, 65536); os.close(r); os.waitpid(pid, 0)
    wr.write(out.replace(b"\n", b" ") + b"\n"); wr.flush()
"""


async def warm_fork(backend: BubblewrapBackend, n: int) -> dict[str, float]:
    """Round trips to a Python kept warm inside one bubblewrap sandbox, forking a child per snippet."""
    box = await backend.start(LIMITS)
    status_read, status_write = os.pipe()
    argv, cwd = backend.command(box, ["python3", "-u", "-c", WARM_SERVER], {}, "/work", 60, status_write)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        pass_fds=(status_write,),
    )
    os.close(status_write)
    assert proc.stdin is not None and proc.stdout is not None
    samples = []
    try:
        for _ in range(n):
            began = time.perf_counter()
            proc.stdin.write(b"print(6 * 7)\n")
            await proc.stdin.drain()
            line = await proc.stdout.readline()
            samples.append(time.perf_counter() - began)
            assert line.strip() == b"42", line
    finally:
        proc.kill()
        await proc.wait()
        status = json.loads(os.read(status_read, 4096).splitlines()[0])
        os.close(status_read)
        orphan_reaper().add(int(status["child-pid"]))  # bwrap's namespace init, orphaned to us
        await box.close()
    return {"p50": pct(samples, 0.5), "p99": pct(samples, 0.99)}


async def bench(kind: str, args: argparse.Namespace) -> dict[str, Any] | None:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    backend: SandboxBackend = (BubblewrapBackend if kind == "bubblewrap" else DockerBackend)(server_name=name)
    try:
        await backend.check()
    except SandboxUnavailable as exc:
        console.print(f"[yellow]{kind}: unavailable ({exc.detail})[/yellow]")
        await backend.aclose()
        return None
    result: dict[str, Any] = {"backend": kind}
    try:
        console.print(f"[bold]{kind}[/bold]: cold start ...")
        result["cold"] = await cold_start(backend, args.cold)
        console.print(f"[bold]{kind}[/bold]: warm exec ...")
        result["warm"] = await warm_exec(backend, args.warm)
        result["throughput"] = {}
        for level in (1, 8, 32):
            console.print(f"[bold]{kind}[/bold]: throughput at concurrency {level} ...")
            result["throughput"][level] = await throughput(backend, level, args.seconds)
        if isinstance(backend, BubblewrapBackend):
            result["warm_fork"] = await warm_fork(backend, args.warm)
        console.print(f"[bold]{kind}[/bold]: {args.runs} runs with faults ...")
        result["faults"] = await faults(backend, args.runs, args.fault_every, args.engine_restart)
    finally:
        await backend.aclose()
    result["leftovers"] = await asyncio.to_thread(leftovers, backend)
    return result


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory = int(Path("/proc/meminfo").read_text().split()[1]) / 1024 / 1024
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{cpu}, {os.cpu_count()} cores, {memory:.1f} GiB RAM; Linux {platform.release()}; "
        f"Python {platform.python_version()}; load average {load}; "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    )


def render(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "# Sandbox benchmarks",
        "",
        f"`benchmarks/sandbox.py` (runs with faults: {args.runs}, one fault every {args.fault_every} runs"
        f"{', dockerd stopped and restarted a third of the way through' if args.engine_restart else ''}).",
        f"**Machine.** {machine()}. The machine is shared, so numbers are noisy.",
        "",
        "| backend | cold start p50 | start + first exec p50 | warm exec p50 (python) | warm exec p99 | "
        "warm exec p50 (true) | execs/s c=1 | c=8 | c=32 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        c, w, t = r["cold"], r["warm"], r["throughput"]
        lines.append(
            f"| {r['backend']} | {ms(c['start_p50'])} | {ms(c['first_exec_p50'])} | {ms(w['py_p50'])} | "
            f"{ms(w['py_p99'])} | {ms(w['true_p50'])} | {t[1]:.0f} | {t[8]:.0f} | {t[32]:.0f} |"
        )
    lines += ["", "| backend | runs | seconds | outcomes | left behind |", "|---|---:|---:|---|---|"]
    for r in results:
        f = r["faults"]
        outcomes = ", ".join(f"{k}: {v}" for k, v in sorted(f["counts"].items()))
        left = ", ".join(r["leftovers"]) or "nothing"
        lines.append(f"| {r['backend']} | {f['runs']} | {f['seconds']:.1f} | {outcomes} | {left} |")
    for r in results:
        if "warm_fork" in r:
            wf = r["warm_fork"]
            lines += [
                "",
                "Warm interpreter (bubblewrap): a Python process kept alive in one sandbox, forking a child "
                f"per snippet, round trip from the host p50 {ms(wf['p50'])}, p99 {ms(wf['p99'])}, against "
                f"{ms(r['warm']['py_p50'])} for a fresh `bwrap` + `python3` per exec.",
            ]
    return "\n".join(lines) + "\n"


def write_docs(text: str) -> Path:
    target = Path(__file__).resolve().parent.parent / "docs" / "benchmarks-sandbox.md"
    target.write_text(text)
    return target


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", choices=["bubblewrap", "docker", "all"], default="all")
    parser.add_argument("--cold", type=int, default=20, help="cold starts per backend")
    parser.add_argument("--warm", type=int, default=200, help="warm execs per backend")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per throughput level")
    parser.add_argument("--runs", type=int, default=10_000, help="runs in the fault phase")
    parser.add_argument("--fault-every", type=int, default=10, help="every Nth run misbehaves")
    parser.add_argument(
        "--engine-restart",
        action="store_true",
        help="stop and restart the local dockerd during the fault phase",
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--write-docs", action="store_true", help="write docs/benchmarks-sandbox.md")
    args = parser.parse_args()
    if args.quick:
        args.cold, args.warm, args.seconds, args.runs = 3, 20, 1.0, 100
    kinds = ["bubblewrap", "docker"] if args.backend == "all" else [args.backend]
    results = [r for r in [await bench(kind, args) for kind in kinds] if r is not None]
    if not results:
        console.print("[red]no sandbox backend works here[/red]")
        return 1
    text = render(results, args)
    table = Table("backend", "cold p50", "warm p50", "warm p99", "c=1/s", "c=8/s", "c=32/s", "leaks")
    for r in results:
        t = r["throughput"]
        table.add_row(
            r["backend"],
            ms(r["cold"]["start_p50"]),
            ms(r["warm"]["py_p50"]),
            ms(r["warm"]["py_p99"]),
            f"{t[1]:.0f}",
            f"{t[8]:.0f}",
            f"{t[32]:.0f}",
            str(len(r["leftovers"])),
        )
    console.print(table)
    console.print(text)
    if args.write_docs:
        console.print(f"wrote {write_docs(text)}")
    return 0 if all(not r["leftovers"] for r in results) else 2


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
