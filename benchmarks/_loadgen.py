"""A minimal HTTP/1.1 keep-alive load generator over raw asyncio streams.

Why not httpx: an httpx request costs the client roughly half a millisecond of CPU (pool bookkeeping,
header models, h11 state machine), so a load generator built on it saturates its own core at 1-2k
requests/s and a benchmark of a faster server ends up measuring the client. This module does the least
an honest HTTP/1.1 client can do: one persistent connection per simulated client, each request rendered
into a single bytes object and written in one call, the status line and headers parsed with bytes
operations, and a Content-Length (or chunked) body read exactly. No pooling, redirects, cookies, TLS or
pipelining: every request waits for its response, like an RL rollout worker waiting for its observation.

It also holds `serve_stub`, a canned-response HTTP server used only to measure this client's own
ceiling (how many requests/s it can drive when the server costs nearly nothing), and `hammer`, the
closed loop that measures it. Run `python benchmarks/_loadgen.py stub --port P` to start the stub.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import resource
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

try:  # orjson comes with the server; fall back to the standard library so the module stands alone.
    import orjson

    def _loads(data: bytes) -> Any:
        return orjson.loads(data)

    def _dumps(value: Any) -> bytes:
        return orjson.dumps(value)

except ImportError:  # pragma: no cover - orjson is a server dependency
    import json

    def _loads(data: bytes) -> Any:
        return json.loads(data)

    def _dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()


__all__ = [
    "HttpConnection",
    "HttpError",
    "LatencyStats",
    "ProtocolError",
    "Response",
    "error_kind",
    "hammer",
    "percentile",
    "run",
    "serve_stub",
]

T = TypeVar("T")

MAX_HEAD_BYTES = 64 * 1024  # a response head larger than this is treated as a protocol error
MAX_BODY_BYTES = 64 * 1024 * 1024  # bounds what one response may make us buffer
MAX_CHUNKS = 1_000_000  # bounds the loops of a chunked body (and its trailer lines)


class ProtocolError(Exception):
    """The server sent something that is not a well-formed HTTP/1.1 response."""


class HttpError(Exception):
    """A response with an unexpected status; `kind` is what error counters are keyed by."""

    def __init__(self, response: Response, expected: int) -> None:
        super().__init__(f"expected {expected}, got {response.status}: {response.body[:200]!r}")
        self.response = response


@dataclass(slots=True)
class Response:
    """Status, lower-cased headers and the whole body of one HTTP response."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return _loads(self.body)


def error_kind(exc: BaseException) -> str:
    """A short, stable label for an error, so a run reports "3 x ConnectionResetError", not 3 tracebacks."""
    if isinstance(exc, HttpError):
        return f"http {exc.response.status}"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed mid-response"
    if isinstance(exc, ProtocolError):
        return "protocol error"
    return type(exc).__name__


class HttpConnection:
    """One keep-alive HTTP/1.1 connection; `request` sends one request and reads its whole response.

    Not safe for concurrent use: a simulated client owns one connection and awaits each response
    before sending the next request, which is also how HTTP/1.1 without pipelining works.
    """

    def __init__(self, host: str, port: int, *, timeout_s: float = 30.0) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._host_header = f"Host: {host}:{port}\r\n".encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.connects = 0

    async def connect(self) -> None:
        await self.close()
        async with asyncio.timeout(self.timeout_s):
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, limit=MAX_HEAD_BYTES
            )
        self.connects += 1

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def render(self, method: str, path: str, body: bytes | None = None) -> bytes:
        """The request's bytes; callers that repeat a request can render it once and reuse it."""
        head = f"{method} {path} HTTP/1.1\r\n".encode() + self._host_header
        if body is None:
            return head + b"\r\n" if method in ("GET", "HEAD") else head + b"Content-Length: 0\r\n\r\n"
        return (
            head
            + b"Content-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )

    async def request(
        self, method: str, path: str, body: bytes | None = None, *, json: Any = None
    ) -> Response:
        if json is not None:
            body = _dumps(json)
        return await self.send(self.render(method, path, body), head_only=method == "HEAD")

    async def send(self, data: bytes, *, head_only: bool = False) -> Response:
        """Write pre-rendered request bytes and read the response (reconnecting first if needed)."""
        if self._writer is None or self._writer.is_closing():
            await self.connect()
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        try:
            async with asyncio.timeout(self.timeout_s):
                writer.write(data)
                if writer.transport.get_write_buffer_size() > 65536:
                    await writer.drain()
                response = await _read_response(reader, head_only)
        except BaseException:
            # The connection's state is unknown (half a response may be buffered): start afresh.
            await self.close()
            raise
        if response.headers.get("connection", "").lower() == "close":
            await self.close()
        return response


async def _read_response(reader: asyncio.StreamReader, head_only: bool) -> Response:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as exc:
        raise ProtocolError("response head too large") from exc
    lines = head[:-4].split(b"\r\n")
    status_line = lines[0]
    if not status_line.startswith(b"HTTP/1."):
        raise ProtocolError(f"bad status line {status_line[:80]!r}")
    try:
        status = int(status_line[9:12])
    except ValueError as exc:
        raise ProtocolError(f"bad status line {status_line[:80]!r}") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ProtocolError(f"bad header line {line[:80]!r}")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    if head_only or status in (204, 304) or 100 <= status < 200:
        return Response(status, headers, b"")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Response(status, headers, await _read_chunked(reader))
    length_text = headers.get("content-length")
    if length_text is None:
        # No length and not chunked: the body runs to the end of the connection (RFC 9112 6.3).
        body = await reader.read(MAX_BODY_BYTES)
        headers["connection"] = "close"
        return Response(status, headers, body)
    try:
        length = int(length_text)
    except ValueError as exc:
        raise ProtocolError(f"bad content-length {length_text!r}") from exc
    if not 0 <= length <= MAX_BODY_BYTES:
        raise ProtocolError(f"content-length {length} out of bounds")
    return Response(status, headers, await reader.readexactly(length) if length else b"")


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    for _ in range(MAX_CHUNKS):
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from exc
        if size == 0:
            # Trailers, if any, end with an empty line.
            for _ in range(MAX_CHUNKS):
                if await reader.readuntil(b"\r\n") == b"\r\n":
                    return b"".join(parts)
            raise ProtocolError("too many trailer lines")
        total += size
        if total > MAX_BODY_BYTES:
            raise ProtocolError("chunked body too large")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("chunk not followed by CRLF")
    raise ProtocolError("too many chunks")


# -- statistics ------------------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in 0..100); NaN when empty."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), math.ceil(q / 100 * len(sorted_values))))
    return sorted_values[rank - 1]


@dataclass(slots=True)
class LatencyStats:
    """Latencies (seconds) and error counts gathered during one measured window."""

    samples: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    def summary(self) -> tuple[float, float, float]:
        """(p50, p99, max) in milliseconds."""
        ordered = sorted(self.samples)
        if not ordered:
            return float("nan"), float("nan"), float("nan")
        return percentile(ordered, 50) * 1e3, percentile(ordered, 99) * 1e3, ordered[-1] * 1e3


def cpu_seconds_self() -> float:
    """CPU time (user + system) this process has used, to show whether the load generator saturates."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(slots=True)
class HammerResult:
    clients: int
    requests: int
    seconds: float
    stats: LatencyStats
    loadgen_cpu: float  # fraction of one core the client used during the window

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


async def hammer(
    host: str,
    port: int,
    path: str,
    clients: int,
    duration_s: float,
    *,
    warmup_s: float = 0.5,
    expect: int = 200,
    max_requests_per_client: int = 50_000_000,
) -> HammerResult:
    """`clients` connections each GET `path` back to back for `duration_s` (after a warm-up).

    Measures how many requests/s this client can drive; against a server that costs nearly
    nothing (`serve_stub`) that is the load generator's own ceiling.
    """
    connections = [HttpConnection(host, port, timeout_s=10.0) for _ in range(clients)]
    await asyncio.gather(*(c.connect() for c in connections))
    stats = LatencyStats()
    counts = [0] * clients
    start = time.perf_counter()
    measure_from = start + warmup_s
    deadline = measure_from + duration_s
    cpu_marks: list[float] = []

    async def mark_window() -> None:
        # CPU time sampled at both ends of the measured window, so warm-up and stragglers don't count.
        for moment in (measure_from, deadline):
            await asyncio.sleep(max(0.0, moment - time.perf_counter()))
            cpu_marks.append(cpu_seconds_self())

    async def client(index: int, connection: HttpConnection) -> None:
        data = connection.render("GET", path)
        clock = time.perf_counter
        samples = stats.samples
        for _ in range(max_requests_per_client):
            began = clock()
            if began >= deadline:
                return
            try:
                response = await connection.send(data)
                if response.status != expect:
                    raise HttpError(response, expect)
            except Exception as exc:
                if began >= measure_from:
                    stats.errors[error_kind(exc)] += 1
                await asyncio.sleep(0.01)  # do not spin on a dead server
                continue
            if began >= measure_from:
                samples.append(clock() - began)
                counts[index] += 1

    marker = asyncio.ensure_future(mark_window())
    try:
        await asyncio.gather(*(client(i, c) for i, c in enumerate(connections)))
    finally:
        await marker
        await asyncio.gather(*(c.close() for c in connections))
    cpu = (cpu_marks[1] - cpu_marks[0]) / duration_s if len(cpu_marks) == 2 else float("nan")
    # Requests begun inside [measure_from, deadline) count; the rate is over exactly that window.
    return HammerResult(clients, sum(counts), duration_s, stats, cpu)


# -- the stub server -------------------------------------------------------------------------------

_STUB_BODY = b'{"status":"ok"}'
_STUB_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(_STUB_BODY)).encode()
    + b"\r\n\r\n"
    + _STUB_BODY
)


class _StubProtocol(asyncio.Protocol):
    """Answers every request with the same canned 200 (handles Content-Length bodies and pipelining)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        out: list[bytes] = []
        while len(out) < 10_000:  # bounded per read; leftovers wait for the next data_received
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = bytes(buffer[:end]).lower()
            length = 0
            marker = head.find(b"content-length:")
            if marker >= 0:
                line_end = head.find(b"\r\n", marker)
                length = int(head[marker + 15 : line_end if line_end >= 0 else None])
            total = end + 4 + length
            if len(buffer) < total:
                break
            del buffer[:total]
            out.append(_STUB_RESPONSE)
        if len(buffer) > MAX_HEAD_BYTES + MAX_BODY_BYTES and self.transport is not None:
            self.transport.close()
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve_stub(host: str, port: int, lifetime_s: float) -> None:
    """Serve canned responses for at most `lifetime_s` seconds (the parent normally stops it sooner)."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_StubProtocol, host, port, backlog=4096)
    async with server:
        await asyncio.sleep(lifetime_s)


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on uvloop when it is installed (it is, with uvicorn[standard]), else asyncio."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.run(main())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    stub = sub.add_parser("stub", help="serve canned 200 responses (to measure the client's ceiling)")
    stub.add_argument("--host", default="127.0.0.1")
    stub.add_argument("--port", type=int, required=True)
    stub.add_argument("--cpu", type=int, default=None, help="pin to this core")
    stub.add_argument("--lifetime", type=float, default=600.0, help="exit after this many seconds")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    with contextlib.suppress(KeyboardInterrupt):
        run(lambda: serve_stub(args.host, args.port, args.lifetime))


if __name__ == "__main__":
    _main()
