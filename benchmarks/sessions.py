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
* A "held sessions" phase opens N sessions, reports resident memory over the baseline, steps a sample
  of them to prove they are alive, and closes them all.

Every loop is bounded in count and time; the server and the stub are stopped on exit, error or Ctrl-C.
Run `python benchmarks/sessions.py --quick` for a smoke run, `--write-docs` to update docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python benchmarks/sessions.py` from anywhere

from _loadgen import (
    HammerResult,
    HttpConnection,
    HttpError,
    Response,
    _read_response,
    cpu_seconds_self,
    error_kind,
    hammer,
    percentile,
    run,
)
from _profile import PySpy, summarize

HOST = "127.0.0.1"  # loopback only, always
REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "benchmarks.md"
SERVER_CORE, LOADGEN_CORE = 0, 1
STEP_BODY = (
    b'{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function",'
    b'"function":{"name":"add","arguments":"{\\"amount\\": 1}"}}]}}'
)
COUNTER_TASKS = 60  # counter-0000 .. counter-0059
MAX_EPISODES_PER_CLIENT = 10_000_000  # loop bound; the duration ends a level long before this

# Wide when piped (to a file or `tee`), so the tables keep one row per line.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 180)

# design.md "Targets to benchmark": peers measured on this machine class (one server core), for context.
PEERS: list[tuple[str, str, str, str]] = [
    ("bare Starlette JSON echo, uvloop + httptools (the floor)", "5,582, 0.12 ms", "16,198", "14,439, 24 ms"),
    ("OpenEnv WebSocket sessions, uvloop + httptools", "2,239, 0.21 ms", "3,372", "2,901, 697 ms"),
    ("OpenEnv HTTP (stateless per request), uvloop + httptools", "3,107, 0.26 ms", "3,846", "1,661, 303 ms"),
    ("NeMo Gym resources server (run_webserver, Ray off)", "1,049, 0.63 ms", "930", "478, 653 ms"),
    ("a plain FastAPI app with a dict of sessions", "3,457, 0.20 ms", "6,001", "4,950, 78 ms"),
]


# -- machine and processes ---------------------------------------------------------------------------


def _first_match(path: str, pattern: str) -> str | None:
    with contextlib.suppress(OSError):
        match = re.search(pattern, Path(path).read_text(), re.MULTILINE)
        if match:
            return match.group(1).strip()
    return None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_description() -> dict[str, str]:
    """Everything a reader needs to judge the numbers: CPU, cores, RAM, software versions, load, date."""
    mem_kb = _first_match("/proc/meminfo", r"^MemTotal:\s+(\d+)")
    git = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    return {
        "cpu": _first_match("/proc/cpuinfo", r"^model name\s*:\s*(.+)$") or platform.processor() or "?",
        "cores": str(os.cpu_count()),
        "ram": f"{int(mem_kb) / 1024 / 1024:.1f} GiB" if mem_kb else "?",
        "python": platform.python_version(),
        "kernel": f"{platform.system()} {platform.release()}",
        "packages": ", ".join(
            f"{name} {_version(name)}" for name in ("uvicorn", "uvloop", "httptools", "fastapi", "pydantic")
        ),
        "git": git or "?",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": " / ".join(load),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def pin(pid: int, core: int) -> bool:
    """Pin a process to one core when the machine has it; returns whether it did."""
    if (os.cpu_count() or 1) <= core:
        return False
    os.sched_setaffinity(pid, {core})
    return True


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process and all its threads, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mb(pid: int) -> float:
    kb = _first_match(f"/proc/{pid}/status", r"^VmRSS:\s+(\d+)")
    return int(kb) / 1024 if kb else float("nan")


def core_busy_seconds() -> dict[int, float]:
    """Busy (non-idle, non-iowait) seconds per core from /proc/stat: shows load from other processes."""
    busy: dict[int, float] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *values = line.split()
            ticks = [int(v) for v in values]
            busy[int(name[3:])] = (sum(ticks[:8]) - ticks[3] - ticks[4]) / CLK_TCK
    return busy


class ManagedProcess:
    """A child process in its own session that is always stopped: SIGINT, then SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str], cwd: Path, log: Path) -> None:
        self.name, self.argv, self.env, self.cwd, self.log_path = name, argv, env, cwd, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, core: int | None) -> None:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the terminal reaches us, not it; we stop it ourselves
            )
        if core is not None:
            # Set right after spawn, while the interpreter is still starting: every thread it
            # creates later (uvicorn, the store writer) inherits the mask.
            pin(self.proc.pid, core)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, grace_s: float = 15.0) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait_s)
        return proc.poll()


# -- results -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class LevelResult:
    clients: int
    seconds: float
    episodes: int = 0
    latencies: dict[str, list[float]] = field(
        default_factory=lambda: {"create": [], "step": [], "verify": [], "delete": []}
    )
    errors: Counter[str] = field(default_factory=Counter)
    rss_before_mb: float = 0.0
    rss_after_mb: float = 0.0
    server_cpu: float = 0.0  # fraction of one core during the measured window
    loadgen_cpu: float = 0.0
    other_cpu: float = 0.0  # busy time on both cores not used by server or load generator, in cores

    @property
    def steps(self) -> int:
        return len(self.latencies["step"])

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    @property
    def server_us_per_request(self) -> float:
        """Server CPU per request: unlike steps/s, barely moved by other processes taking the core."""
        return self.server_cpu * self.seconds / self.requests * 1e6 if self.requests else float("nan")

    @property
    def steps_per_server_core(self) -> float:
        """Steps per second of server CPU: the rate the server would reach with its core to itself."""
        busy = self.server_cpu * self.seconds
        return self.steps / busy if busy else float("nan")

    def p(self, kind: str, q: float) -> float:
        return percentile(sorted(self.latencies[kind]), q) * 1e3


@dataclass(slots=True)
class HeldResult:
    sessions: int
    opened: int = 0
    open_seconds: float = 0.0
    live_reported: int | None = None
    rss_baseline_mb: float = 0.0
    rss_held_mb: float = 0.0
    rss_closed_mb: float = 0.0
    sampled: int = 0
    sample_ok: int = 0
    sample_p50_ms: float = float("nan")
    closed: int = 0
    close_seconds: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def over_baseline_mb(self) -> float:
        return self.rss_held_mb - self.rss_baseline_mb


@dataclass(slots=True)
class CeilingRow:
    target: str
    result: HammerResult


@dataclass(slots=True)
class Report:
    args: argparse.Namespace
    machine: dict[str, str]
    pinned: bool
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    ceiling: list[CeilingRow] = field(default_factory=list)
    levels: list[LevelResult] = field(default_factory=list)
    held: HeldResult | None = None
    server_rss_start_mb: float = 0.0
    load_end: str = ""


def _fmt_errors(errors: Counter[str]) -> str:
    if not errors:
        return "0"
    return ", ".join(f"{count} x {kind}" for kind, count in errors.most_common())


def _ms(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"  # NaN check without importing math


# -- correctness of the load generator ---------------------------------------------------------------


async def self_check(port: int, report: Report) -> bool:
    """Check `_loadgen` against the live server (and httpx) before trusting any number it produces."""
    import httpx

    def check(name: str, ok: bool, detail: str = "") -> None:
        report.checks.append((name, ok, detail))

    conn = HttpConnection(HOST, port, timeout_s=10.0)
    try:
        async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=10.0) as ref:
            health = await conn.request("GET", "/healthz")
            ref_health = await ref.get("/healthz")
            check(
                "GET /healthz matches httpx",
                health.status == ref_health.status_code == 200 and health.json() == ref_health.json(),
                f"{health.status} {health.body!r}",
            )
            created = await conn.request(
                "POST", "/v1/sessions", json={"env": "counter", "task_id": "counter-0000", "seed": 0}
            )
            body = created.json() if created.status == 201 else {}
            sid = str(body.get("session_id", ""))
            check(
                "create: 201 with session_id, messages, tools",
                created.status == 201 and bool(re.fullmatch(r"[0-9a-f]{32}", sid)) and bool(body["tools"]),
                f"{created.status} {created.body[:120]!r}",
            )
            if created.status != 201:
                return False
            check(
                "K steps fit in the episode",
                report.args.steps < int(body["max_turns"]),
                f"--steps {report.args.steps}, max_turns {body['max_turns']}",
            )
            mine = await conn.request("GET", f"/v1/sessions/{sid}")
            theirs = await ref.get(f"/v1/sessions/{sid}")
            strip = {"expires_at"}  # computed from the clock at each call
            check(
                "GET session JSON matches httpx",
                mine.status == theirs.status_code == 200
                and {k: v for k, v in mine.json().items() if k not in strip}
                == {k: v for k, v in theirs.json().items() if k not in strip},
            )
            read = await conn.request(
                "POST",
                f"/v1/sessions/{sid}/step",
                json={
                    "message": {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "r", "type": "function", "function": {"name": "read", "arguments": "{}"}}
                        ],
                    }
                },
            )
            value = int(read.json()["messages"][0]["content"]) if read.status == 200 else None
            step = await conn.request("POST", f"/v1/sessions/{sid}/step", STEP_BODY)
            stepped = step.json() if step.status == 200 else {}
            message = (stepped.get("messages") or [{}])[0]
            check(
                "step: 200, tool message, counter + 1, not done",
                step.status == 200
                and message.get("role") == "tool"
                and message.get("tool_call_id") == "c1"
                and value is not None
                and message.get("content") == str(value + 1)
                and stepped.get("done") is False
                and stepped.get("reward") is None,
                f"{step.status} {step.body[:160]!r}",
            )
            verify = await conn.request("POST", f"/v1/sessions/{sid}/verify")
            verified = verify.json() if verify.status == 200 else {}
            check(
                "verify: 200 with reward and components",
                verify.status == 200
                and isinstance(verified.get("reward"), float)
                and "components" in verified,
                f"{verify.status} {verify.body[:120]!r}",
            )
            deleted = await conn.request("DELETE", f"/v1/sessions/{sid}")
            check("delete: 204, empty body", deleted.status == 204 and deleted.body == b"")
            gone = await conn.request("POST", f"/v1/sessions/{sid}/step", STEP_BODY)
            check(
                "step after delete: 410 problem+json (connection reused after a 204)",
                gone.status == 410 and gone.headers.get("content-type", "").startswith("application/problem"),
                f"{gone.status} {gone.headers.get('content-type')}",
            )
            unknown = await conn.request("GET", "/v1/sessions/" + "0" * 32)
            check("unknown session: 404", unknown.status == 404, str(unknown.status))
            bad = await conn.request("POST", "/v1/sessions", b"{not json")
            check("malformed JSON: 422", bad.status == 422, str(bad.status))
            after = await conn.request("GET", "/healthz")
            check(
                "keep-alive: one connection for all of the above",
                after.status == 200 and conn.connects == 1,
                f"{conn.connects} connects",
            )
    finally:
        await conn.close()
    check("chunked bodies decode", await _check_chunked())
    return all(ok for _, ok, _ in report.checks)


async def _check_chunked() -> bool:
    """The server answers with Content-Length; chunked decoding is checked on canned bytes."""
    reader = asyncio.StreamReader()
    reader.feed_data(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n6;x=y\r\npedia \r\n0\r\n\r\n"
    )
    reader.feed_eof()
    response = await _read_response(reader, head_only=False)
    return response.status == 200 and response.body == b"Wikipedia "


# -- the episode workload ----------------------------------------------------------------------------


async def run_level(port: int, server: ManagedProcess, clients: int, args: argparse.Namespace) -> LevelResult:
    """C clients loop over episodes for the warm-up plus D seconds; only the D-second window counts."""
    result = LevelResult(clients=clients, seconds=args.duration)
    connections = [HttpConnection(HOST, port, timeout_s=30.0) for _ in range(clients)]
    for start in range(0, clients, 64):  # connect in batches so the accept backlog never overflows
        await asyncio.gather(*(c.connect() for c in connections[start : start + 64]))
    result.rss_before_mb = proc_rss_mb(server.pid)
    warmup = args.warmup
    measure_from = time.perf_counter() + warmup
    deadline = measure_from + args.duration
    marks: list[tuple[float, float, dict[int, float]]] = []
    create_bodies = [
        f'{{"env":"counter","task_id":"counter-{i % COUNTER_TASKS:04d}","seed":{i}}}'.encode()
        for i in range(COUNTER_TASKS)
    ]

    async def mark_window() -> None:
        for moment in (measure_from, deadline):
            await asyncio.sleep(max(0.0, moment - time.perf_counter()))
            marks.append((proc_cpu_seconds(server.pid), cpu_seconds_self(), core_busy_seconds()))

    async def client(index: int, conn: HttpConnection) -> None:
        clock = time.perf_counter
        lat = result.latencies
        errors = result.errors
        create_data = conn.render("POST", "/v1/sessions", create_bodies[index % COUNTER_TASKS])

        async def call(kind: str, data: bytes, expect: int) -> Response | None:
            began = clock()
            try:
                response = await conn.send(data)
            except Exception as exc:
                errors[f"{kind}: {error_kind(exc)}"] += 1
                return None
            ended = clock()
            if response.status != expect:
                errors[f"{kind}: {error_kind(HttpError(response, expect))}"] += 1
                return None
            if measure_from <= began < deadline:
                lat[kind].append(ended - began)
            return response

        for _ in range(MAX_EPISODES_PER_CLIENT):
            if clock() >= deadline:
                return
            created = await call("create", create_data, 201)
            if created is None:
                await asyncio.sleep(0.05)  # 429 or a broken connection: back off, don't spin
                continue
            sid = created.json()["session_id"]
            step_data = conn.render("POST", f"/v1/sessions/{sid}/step", STEP_BODY)
            episode_began = clock()
            for _ in range(args.steps):
                if clock() >= deadline:
                    break
                stepped = await call("step", step_data, 200)
                if stepped is None:
                    break
                if not stepped.body.startswith(b'{"messages":[{"role":"tool"'):
                    errors["step: unexpected body"] += 1
                    break
            else:
                await call("verify", conn.render("POST", f"/v1/sessions/{sid}/verify"), 200)
            # Always close, also past the deadline, so a level leaves no sessions behind.
            deleted = await call("delete", conn.render("DELETE", f"/v1/sessions/{sid}"), 204)
            if deleted is not None and measure_from <= episode_began < deadline:
                result.episodes += 1

    marker = asyncio.ensure_future(mark_window())
    try:
        await asyncio.gather(*(client(i, c) for i, c in enumerate(connections)))
    finally:
        await marker
        await asyncio.gather(*(c.close() for c in connections))
    (server0, self0, cores0), (server1, self1, cores1) = marks
    result.server_cpu = (server1 - server0) / args.duration
    result.loadgen_cpu = (self1 - self0) / args.duration
    busy = sum(cores1.get(c, 0.0) - cores0.get(c, 0.0) for c in (SERVER_CORE, LOADGEN_CORE))
    result.other_cpu = max(0.0, busy / args.duration - result.server_cpu - result.loadgen_cpu)
    await asyncio.sleep(0.3)  # let the store's writer flush the closes before reading RSS
    result.rss_after_mb = proc_rss_mb(server.pid)
    return result


async def run_held(port: int, server: ManagedProcess, args: argparse.Namespace) -> HeldResult:
    """Open N sessions (bounded concurrency), measure memory, step a sample, then close them all."""
    held = HeldResult(sessions=args.sessions_held)
    width = min(args.held_concurrency, args.sessions_held) or 1
    connections = [HttpConnection(HOST, port, timeout_s=30.0) for _ in range(width)]
    await asyncio.gather(*(c.connect() for c in connections))
    await asyncio.sleep(1.5)  # the previous level's closes reach the store; the reaper ticks once
    held.rss_baseline_mb = proc_rss_mb(server.pid)
    ids: list[str] = []
    counter = iter(range(args.sessions_held))
    phase_deadline = time.perf_counter() + args.held_timeout

    def take(source: Iterator[int]) -> int | None:
        return next(source, None) if time.perf_counter() < phase_deadline else None

    async def opener(conn: HttpConnection) -> None:
        while (i := take(counter)) is not None:
            body = f'{{"env":"counter","task_id":"counter-{i % COUNTER_TASKS:04d}","seed":{i}}}'.encode()
            try:
                response = await conn.request("POST", "/v1/sessions", body)
                if response.status != 201:
                    raise HttpError(response, 201)
                ids.append(response.json()["session_id"])
            except Exception as exc:
                held.errors[f"create: {error_kind(exc)}"] += 1

    began = time.perf_counter()
    await asyncio.gather(*(opener(c) for c in connections))
    held.open_seconds = time.perf_counter() - began
    held.opened = len(ids)
    ready = await connections[0].request("GET", "/readyz")
    if ready.status == 200:
        held.live_reported = int(ready.json().get("live_sessions", -1))
    await asyncio.sleep(1.5)  # the creation rows reach the store before memory is read
    held.rss_held_mb = proc_rss_mb(server.pid)

    sample = random.Random(0).sample(ids, min(len(ids), args.held_sample))
    sample_iter = iter(sample)
    sample_lat: list[float] = []

    async def stepper(conn: HttpConnection) -> None:
        while (sid := next(sample_iter, None)) is not None:
            t0 = time.perf_counter()
            try:
                response = await conn.request("POST", f"/v1/sessions/{sid}/step", STEP_BODY)
                if response.status != 200:
                    raise HttpError(response, 200)
                sample_lat.append(time.perf_counter() - t0)
            except Exception as exc:
                held.errors[f"sample step: {error_kind(exc)}"] += 1

    # One at a time, so the latency is comparable with the 1-client level: a step with N sessions open.
    await stepper(connections[0])
    held.sampled, held.sample_ok = len(sample), len(sample_lat)
    held.sample_p50_ms = percentile(sorted(sample_lat), 50) * 1e3

    close_iter = iter(ids)
    closed: list[int] = [0]
    close_deadline = time.perf_counter() + args.held_timeout

    async def closer(conn: HttpConnection) -> None:
        while time.perf_counter() < close_deadline and (sid := next(close_iter, None)) is not None:
            try:
                response = await conn.request("DELETE", f"/v1/sessions/{sid}")
                if response.status != 204:
                    raise HttpError(response, 204)
                closed[0] += 1
            except Exception as exc:
                held.errors[f"close: {error_kind(exc)}"] += 1

    began = time.perf_counter()
    await asyncio.gather(*(closer(c) for c in connections))
    held.close_seconds = time.perf_counter() - began
    held.closed = closed[0]
    await asyncio.gather(*(c.close() for c in connections))
    await asyncio.sleep(1.0)
    held.rss_closed_mb = proc_rss_mb(server.pid)
    return held


# -- orchestration -----------------------------------------------------------------------------------


async def wait_ready(port: int, server: ManagedProcess, timeout_s: float) -> None:
    deadline = time.perf_counter() + timeout_s
    conn = HttpConnection(HOST, port, timeout_s=5.0)
    try:
        while time.perf_counter() < deadline:
            if not server.alive():
                raise RuntimeError(f"the server exited during start-up:\n{server.log_tail()}")
            with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
                if (await conn.request("GET", "/readyz")).status == 200:
                    return
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    raise RuntimeError(f"the server was not ready after {timeout_s:.0f} s:\n{server.log_tail()}")


async def measure_ceiling(
    args: argparse.Namespace, workdir: Path, gym_port: int, report: Report, stub_core: int | None
) -> None:
    """The load generator's own ceiling (canned-response stub) and the cheapest gym route (/healthz)."""
    stub_port = free_port()
    stub = ManagedProcess(
        "stub",
        [sys.executable, str(Path(__file__).with_name("_loadgen.py")), "stub", "--port", str(stub_port)],
        env=dict(os.environ),
        cwd=workdir,
        log=workdir / "stub.log",
    )
    seconds = args.ceiling_duration
    try:
        stub.start(stub_core)
        for _ in range(100):  # up to 5 s for the stub to listen
            with contextlib.suppress(OSError):
                socket.create_connection((HOST, stub_port), timeout=0.1).close()
                break
            await asyncio.sleep(0.05)
        for clients in args.clients:
            result = await hammer(HOST, stub_port, "/", clients, seconds, warmup_s=0.3)
            report.ceiling.append(CeilingRow("stub (canned 200)", result))
    finally:
        stub.stop(grace_s=2.0)
    for clients in args.clients:
        result = await hammer(HOST, gym_port, "/healthz", clients, seconds, warmup_s=0.3)
        report.ceiling.append(CeilingRow("gym-server GET /healthz", result))


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
            f"  {level.steps / level.seconds:,.0f} steps/s, p50 {_ms(level.p('step', 50))} ms, "
            f"p99 {_ms(level.p('step', 99))} ms, errors {_fmt_errors(level.errors)}"
        )


# -- output ------------------------------------------------------------------------------------------


def print_machine(report: Report) -> None:
    m = report.machine
    console.rule("[bold]gym-server session benchmark")
    console.print(f"CPU      {m['cpu']}, {m['cores']} cores, {m['ram']} RAM")
    console.print(f"software Python {m['python']}, {m['kernel']}, {m['packages']}")
    console.print(f"code     git {m['git']} (working tree as it is)")
    console.print(f"date     {m['date']}, load average at start {m['load']}")
    console.print(
        "pinning  "
        + (
            f"server on core {SERVER_CORE}, load generator on core {LOADGEN_CORE}"
            if report.pinned
            else "[yellow]none: fewer than 2 cores, numbers are not comparable[/]"
        )
    )


def print_checks(report: Report) -> None:
    table = Table(title="load generator self-check against the live server")
    table.add_column("check")
    table.add_column("ok")
    table.add_column("detail", overflow="fold")
    for name, ok, detail in report.checks:
        table.add_row(name, "[green]yes[/]" if ok else "[red]NO[/]", "" if ok else detail)
    console.print(table)


def print_ceiling(report: Report) -> None:
    table = Table(title="load generator ceiling (GET, one connection per client)")
    columns = (
        "target",
        "clients",
        "req/s",
        "p50 ms",
        "p99 ms",
        "loadgen CPU",
        "CPU µs/req",
        "est. max req/s",
    )
    for name in (*columns, "errors"):
        table.add_column(name, justify="right" if name != "target" else "left")
    for row in report.ceiling:
        r = row.result
        p50, p99, _ = r.stats.summary()
        table.add_row(
            row.target,
            str(r.clients),
            f"{r.rate:,.0f}",
            _ms(p50),
            _ms(p99),
            f"{r.loadgen_cpu:.0%}",
            *_cpu_per_request(r),
            _fmt_errors(r.stats.errors),
        )
    console.print(table)


def _cpu_per_request(r: HammerResult) -> tuple[str, str]:
    """The load generator's CPU cost per request, and the rate one core of it could drive at 100%."""
    if not r.requests or r.loadgen_cpu != r.loadgen_cpu:
        return "n/a", "n/a"
    per_request = r.loadgen_cpu * r.seconds / r.requests
    return f"{per_request * 1e6:.0f}", f"{1 / per_request:,.0f}"


def print_results(report: Report) -> None:
    args = report.args
    table = Table(
        title=f"episodes: create, {args.steps} steps, verify, delete ({args.duration:g} s per level)"
    )
    columns = (
        "clients",
        "episodes",
        "steps/s",
        "req/s",
        "step p50 ms",
        "step p99 ms",
        "create p50 ms",
        "errors",
        "server CPU",
        "server µs/req",
        "steps/s per server core",
        "loadgen CPU",
        "other load",
        "server RSS MB",
    )
    for name in columns:
        table.add_column(name, justify="right")
    for lv in report.levels:
        table.add_row(
            str(lv.clients),
            f"{lv.episodes:,}",
            f"{lv.steps / lv.seconds:,.0f}",
            f"{lv.requests / lv.seconds:,.0f}",
            _ms(lv.p("step", 50)),
            _ms(lv.p("step", 99)),
            _ms(lv.p("create", 50)),
            _fmt_errors(lv.errors),
            f"{lv.server_cpu:.0%}",
            f"{lv.server_us_per_request:.0f}",
            f"{lv.steps_per_server_core:,.0f}",
            f"{lv.loadgen_cpu:.0%}",
            f"{lv.other_cpu:.2f} cores",
            f"{lv.rss_before_mb:.0f} → {lv.rss_after_mb:.0f}",
        )
    console.print(table)
    if report.held:
        h = report.held
        held = Table(title=f"held sessions: {h.sessions:,} opened, then a sample stepped, then all closed")
        for name in ("opened", "open rate", "server live", "RSS MB", "over baseline", "per session"):
            held.add_column(name, justify="right")
        for name in ("sample stepped", "sample p50 ms", "closed", "RSS after close", "errors"):
            held.add_column(name, justify="right")
        held.add_row(*held_row(h))
        console.print(held)
    targets = Table(title="measured vs targets (issue 2, design.md) and the best peer in design.md")
    for name in ("metric", "measured", "issue 2 target", "design.md target", "best peer (design.md)"):
        targets.add_column(name)
    for row in target_rows(report):
        targets.add_row(*row)
    console.print(targets)
    peers = Table(title="peers from design.md (measured elsewhere on this machine class; context only)")
    for name in ("server", "1 client: steps/s, p50", "16 clients: steps/s", "256 clients: steps/s, p99"):
        peers.add_column(name)
    for peer in PEERS:
        peers.add_row(*peer)
    console.print(peers)
    console.print(
        f"[dim]load average at start {report.machine['load']}, at end {report.load_end}. The machine is "
        "shared: 'other load' is busy time on the two cores not used by the server or the load generator.[/]"
    )


def print_profile(path: Path) -> None:
    summary = summarize(path)
    console.print(f"py-spy: {summary.samples:,} samples of the server during the episode levels ({path})")
    for title, rows in (
        ("threads", summary.threads),
        ("self", summary.self_top),
        ("inclusive, below 40% (the shared roots left out)", summary.inclusive_top),
    ):
        table = Table(title=f"server hot spots: {title} samples")
        table.add_column("function")
        table.add_column("samples", justify="right")
        table.add_column("share", justify="right")
        for name, count in rows:
            table.add_row(name, f"{count:,}", f"{count / max(1, summary.samples):.1%}")
        console.print(table)


def held_row(h: HeldResult) -> list[str]:
    per_session_kb = h.over_baseline_mb * 1024 / h.opened if h.opened else float("nan")
    return [
        f"{h.opened:,}",
        f"{h.opened / h.open_seconds:,.0f}/s" if h.open_seconds else "n/a",
        f"{h.live_reported:,}" if h.live_reported is not None else "n/a",
        f"{h.rss_baseline_mb:.0f} → {h.rss_held_mb:.0f}",
        f"{h.over_baseline_mb:.1f} MB",
        f"{per_session_kb:.1f} KB",
        f"{h.sample_ok:,}/{h.sampled:,}",
        _ms(h.sample_p50_ms),
        f"{h.closed:,}",
        f"{h.rss_closed_mb:.0f}",
        _fmt_errors(h.errors),
    ]


def _level(report: Report, clients: int) -> LevelResult | None:
    return next((lv for lv in report.levels if lv.clients == clients), None)


def target_rows(report: Report) -> list[list[str]]:
    rows: list[list[str]] = []
    low = min(report.levels, key=lambda lv: lv.clients) if report.levels else None
    if low is not None:
        rows.append(
            [
                f"step p50 at {low.clients} client(s)",
                f"{_ms(low.p('step', 50))} ms",
                "<= 1 ms",
                "<= 0.2 ms (1 client)",
                "0.12 ms (Starlette echo), 0.20 ms (FastAPI dict)",
            ]
        )
    if report.levels:
        best = max(report.levels, key=lambda lv: lv.steps / lv.seconds)
        rows.append(
            [
                "best steps/s",
                f"{best.steps / best.seconds:,.0f} ({best.clients} clients)",
                ">= 3,000 on 2 cores",
                "2x best peer at every level",
                "16,198 (Starlette echo); 6,001 (FastAPI dict, 16 clients)",
            ]
        )
    for clients, design, peer in (
        (16, ">= 7,700 (one core)", "6,001 (FastAPI dict)"),
        (256, "2x best peer; p99 <= 100 ms", "4,950, p99 78 ms (FastAPI dict)"),
    ):
        lv = _level(report, clients)
        if lv is not None:
            rows.append(
                [
                    f"steps/s at {clients} clients",
                    f"{lv.steps / lv.seconds:,.0f}, p99 {_ms(lv.p('step', 99))} ms",
                    ">= 3,000",
                    design,
                    peer,
                ]
            )
    if report.held:
        h = report.held
        rows.append(
            [
                f"{h.sessions:,} open sessions",
                f"{h.opened:,} opened, {sum(h.errors.values())} errors, "
                f"{h.over_baseline_mb:.0f} MB over baseline",
                "10,000 without errors",
                "10,000 in <= 200 MB over baseline",
                "n/a",
            ]
        )
    return rows


def markdown_section(report: Report) -> str:
    """The "## Sessions" section of docs/benchmarks.md: method, machine, tables."""
    args, m = report.args, report.machine
    store = (
        "the store at `--database-url`" if args.database_url else "its SQLite store in a temporary directory"
    )
    busiest = max((lv.other_cpu for lv in report.levels), default=0.0)
    lines = [
        "## Sessions",
        "",
        " ".join(
            [
                "`benchmarks/sessions.py` starts `gym-server serve` (uvicorn + uvloop + httptools) as a",
                f"separate process pinned to core {SERVER_CORE}, with {store}, and drives it from",
                f"core {LOADGEN_CORE} with a raw-asyncio HTTP/1.1 keep-alive client",
                "(`benchmarks/_loadgen.py`, one connection per client). Each client loops over whole",
                "episodes of the trivial `counter`",
                f"environment: create, {args.steps} `add` steps, verify, delete. Each level runs",
                f"{args.warmup:g} s of warm-up, then {args.duration:g} s measured. Latency is per request,",
                "from writing it to reading the whole response. 'server CPU' is the server process's CPU",
                "time over the window (100% = its whole core); 'server CPU per request' and 'steps/s per",
                "server core' divide by it, so they hold up better than steps/s when other processes take",
                "part of the core. Reproduce with:",
            ]
        ),
        "",
        "```",
        "python benchmarks/sessions.py " + " ".join(report.args.argv),
        "```",
        "",
        "**Machine.** "
        + f"{m['cpu']}, {m['cores']} cores, {m['ram']} RAM; {m['kernel']}; Python {m['python']}; "
        + f"{m['packages']}; git {m['git']} (with the working tree as it was); {m['date']}. "
        + f"Load average {m['load']} at the start and {report.load_end} at the end; 'other load' is busy "
        + "time on the two cores used by neither the server nor the load generator"
        + (
            f" (up to {busiest:.2f} cores here: the machine was shared during the run, so the numbers "
            "are noisy)."
            if busiest > 0.1
            else "."
        ),
        "",
        f"### Episodes ({args.duration:g} s per level)",
        "",
        "| clients | episodes | steps/s | all req/s | step p50 | step p99 | create p50 | errors | "
        "server CPU | server CPU per request | steps/s per server core | loadgen CPU | other load "
        "| server RSS before → after |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in report.levels:
        lines.append(
            f"| {lv.clients} | {lv.episodes:,} | {lv.steps / lv.seconds:,.0f} "
            f"| {lv.requests / lv.seconds:,.0f} "
            f"| {_ms(lv.p('step', 50))} ms | {_ms(lv.p('step', 99))} ms | {_ms(lv.p('create', 50))} ms "
            f"| {_fmt_errors(lv.errors)} | {lv.server_cpu:.0%} | {lv.server_us_per_request:.0f} µs "
            f"| {lv.steps_per_server_core:,.0f} | {lv.loadgen_cpu:.0%} "
            f"| {lv.other_cpu:.2f} cores | {lv.rss_before_mb:.0f} → {lv.rss_after_mb:.0f} MB |"
        )
    if report.held:
        h = report.held
        cells = held_row(h)
        lines += [
            "",
            f"### Held sessions ({h.sessions:,})",
            "",
            f"Opened with {min(args.held_concurrency, h.sessions)} concurrent connections, memory read from "
            "`VmRSS` after the store caught up, then a random sample stepped once each, one at a time, "
            "then all closed.",
            "",
            "| opened | open rate | live (server says) | server RSS | over baseline | per session "
            "| sample stepped | sample p50 | closed | RSS after close | errors |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            "| " + " | ".join([*cells[:7], cells[7] + " ms", cells[8], cells[9] + " MB", *cells[10:]]) + " |",
        ]
    lines += [
        "",
        f"### Load generator ceiling ({args.ceiling_duration:g} s per level)",
        "",
        "The same client, issuing `GET` back to back, against a canned-response stub server on the server's",
        "core (its own ceiling) and against the gym server's cheapest route, `GET /healthz`. The episode",
        "numbers above are meaningful as long as they stay well below the stub row and the load",
        "generator's CPU stays below 100% of its core. 'est. max req/s' is the load generator's CPU time",
        "per request turned into the rate one full core of it could drive; the stub itself (one Python",
        "process on the server's core) usually saturates first.",
        "",
        "| target | clients | req/s | p50 | p99 | loadgen CPU | CPU per request | est. max req/s | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in report.ceiling:
        r = row.result
        p50, p99, _ = r.stats.summary()
        per_request, estimate = _cpu_per_request(r)
        lines.append(
            f"| {row.target} | {r.clients} | {r.rate:,.0f} | {_ms(p50)} ms | {_ms(p99)} ms "
            f"| {r.loadgen_cpu:.0%} | {per_request} µs | {estimate} | {_fmt_errors(r.stats.errors)} |"
        )
    lines += [
        "",
        "### Measured against the targets",
        "",
        "| metric | measured | issue 2 target | design.md target | best peer (design.md) |",
        "|---|---|---|---|---|",
        *("| " + " | ".join(row) + " |" for row in target_rows(report)),
        "",
        "Peers, as listed in design.md (measured elsewhere on this machine class, not by this script):",
        "",
        "| server | 1 client: steps/s, p50 | 16 clients: steps/s | 256 clients: steps/s, p99 |",
        "|---|---|---|---|",
        *("| " + " | ".join(peer) + " |" for peer in PEERS),
        "",
    ]
    return "\n".join(lines)


def write_docs(report: Report, path: Path = DOCS) -> None:
    """Replace the "## Sessions" section of docs/benchmarks.md (create the file if needed), keep the rest."""
    section = markdown_section(report)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "# Benchmarks\n\nNumbers measured by the scripts under `benchmarks/`, each with the machine it "
            "ran on. Re-run a script with `--write-docs` to replace its section.\n\n" + section
        )
        return
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    start = end = None
    in_fence = False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence:
            continue
        if start is None and line.rstrip() == "## Sessions":
            start = index
        elif start is not None and line.startswith("## "):
            end = index
            break
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        tail = "".join(lines[end:]) if end is not None else ""
        new = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    path.write_text(new)


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
    args.clients = [int(c) for c in str(args.clients or "1,16,256").split(",") if c.strip()]
    if args.profile and args.write_docs:
        parser.error("--profile perturbs the server; take the numbers for --write-docs from a plain run")
    if args.profile and not PySpy.available():
        parser.error("--profile needs py-spy (pip install py-spy)")
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 4096:
        parser.error("--clients takes levels between 1 and 4096")
    if not 1 <= args.steps <= 1000 or not 0 < args.duration <= 3600 or args.sessions_held < 0:
        parser.error("--steps 1..1000, --duration 0..3600 s, --sessions-held >= 0")
    return args


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` stops us the same way Ctrl-C does
    pinned = (os.cpu_count() or 1) > LOADGEN_CORE and pin(0, LOADGEN_CORE)
    report = Report(args=args, machine=machine_description(), pinned=pinned)
    print_machine(report)
    with tempfile.TemporaryDirectory(prefix="gym-bench-") as workdir:
        args.workdir = workdir
        port = args.port or free_port()
        env = dict(os.environ)
        env.update(
            {
                "GYM_HOST": HOST,
                "GYM_PORT": str(port),
                "GYM_DATABASE_URL": args.database_url or f"sqlite:///{workdir}/bench.db",
                "GYM_SERVER_NAME": "bench",
                "GYM_LOG_LEVEL": "warning",
                "GYM_SESSIONS__MAX_SESSIONS": str(max(10_000, args.sessions_held + max(args.clients) + 100)),
            }
        )
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
    if args.profile and Path(args.profile).exists():
        print_profile(Path(args.profile))
    if args.write_docs:
        write_docs(report)
        console.print(f"wrote the Sessions section of {DOCS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
