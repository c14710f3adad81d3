"""The session benchmark's workload and its results: the load generator's self-check against the live
server, the episode levels, the held sessions and the load generator's ceiling."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

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
)
from _sessions_system import (
    HOST,
    LOADGEN_CORE,
    SERVER_CORE,
    ManagedProcess,
    core_busy_seconds,
    free_port,
    proc_cpu_seconds,
    proc_rss_mb,
)

if TYPE_CHECKING:  # it imports this module (through protocols.py)
    from _sessions_peers import PeerRow

STEP_BODY = (
    b'{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function",'
    b'"function":{"name":"add","arguments":"{\\"amount\\": 1}"}}]}}'
)
COUNTER_TASKS = 60  # counter-0000 .. counter-0059
MAX_EPISODES_PER_CLIENT = 10_000_000  # loop bound; the duration ends a level long before this

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
    side_by_side: list[PeerRow] = field(default_factory=list)


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


async def wait_ready(port: int, server: ManagedProcess, timeout_s: float, path: str = "/readyz") -> None:
    """Until `GET path` answers 200; a server that exits or stays silent past the timeout is an error."""
    deadline = time.perf_counter() + timeout_s
    conn = HttpConnection(HOST, port, timeout_s=5.0)
    try:
        while time.perf_counter() < deadline:
            if not server.alive():
                raise RuntimeError(f"the server exited during start-up:\n{server.log_tail()}")
            with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
                if (await conn.request("GET", path)).status == 200:
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
