"""Server CPU per request of the HTTP layer alone: the gym's uvicorn configuration against a bare protocol.

    python benchmarks/http_floor.py [--requests 500] [--rounds 40]

Why: an episode is eleven requests, and issue 26 found the rest of the hot path already as cheap as it
was in `ec5d460`, the acknowledged commit aside (docs/benchmarks.md, "Round 6"). What the HTTP layer
itself costs per request bounds what a leaner one could win back. Four servers, each answering a small
POST with a two-byte JSON body from one keep-alive client:

- `the gym's protocol`: uvicorn with uvloop and the gym's own `GymHttpProtocol` (httptools, one write
  per response, deadlines, connection cap; `proxy_headers` off), serving a trivial ASGI app that reads
  the body;
- `uvicorn's httptools protocol`: the same with uvicorn's own `HttpToolsProtocol` (what the gym ran until
  issue 26's round 7, less the deadlines);
- `minimal ASGI protocol`: httptools feeding the same app through one task per request and nothing else
  (no keep-alive timer, flow control, deadlines, pipelining, header checks, upgrades): not a server to
  run, the bound a leaner protocol could approach;
- `bare protocol`: the load generator's canned-response stub (`_loadgen.serve_stub`), no ASGI: what
  uvloop and the sockets cost.

Each server is its own process pinned to the server core (this client on the other), all up at once;
its CPU is read from /proc/<pid>/task/*/schedstat around each burst of `--requests` requests, the servers
taking turns burst by burst (`--rounds` bursts each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import HttpConnection, serve_stub
from _sessions_report import console
from _sessions_system import (
    HOST,
    LOADGEN_CORE,
    REPO,
    SERVER_CORE,
    ManagedProcess,
    free_port,
    machine_description,
    pin,
)
from _sessions_workload import wait_ready
from rich.progress import Progress
from rich.table import Table
from sessions_phases import thread_cpu_seconds

KINDS = {
    "gym": "the gym's protocol",
    "uvicorn": "uvicorn's httptools protocol",
    "minimal": "minimal ASGI protocol",
    "bare": "bare protocol",
}
_BODY = b'{"message":{"role":"assistant","content":"x"}}'

Scope = dict[str, Any]
Message = dict[str, Any]


async def trivial_app(
    scope: Scope, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]
) -> None:
    """Read the request's body, answer 200 with `{}`."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


class MinimalAsgiProtocol(asyncio.Protocol):
    """httptools to an ASGI app, one task per request; only what a small POST needs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        import httptools

        self._loop = loop
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body = b""
        self._head = b""
        self._tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def on_message_begin(self) -> None:
        self._url, self._headers, self._body = b"", [], b""

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        path, _, query = self._url.partition(b"?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": self._parser.get_method().decode(),
            "scheme": "http",
            "path": path.decode(),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": self._headers,
            "server": None,
            "client": None,
        }
        task = self._loop.create_task(trivial_app(scope, self._receive(self._body), self._send))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _receive(body: bytes) -> Callable[[], Awaitable[Message]]:
        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        return receive

    async def _send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            lines = [b"HTTP/1.1 %d OK\r\n" % message["status"]]
            lines += [name + b": " + value + b"\r\n" for name, value in message.get("headers", ())]
            self._head = b"".join(lines) + b"\r\n"
            return
        assert self._transport is not None
        self._transport.write(self._head + message.get("body", b""))


def serve(kind: str, port: int) -> None:
    """Run one server until SIGINT (`--serve`)."""
    import uvloop

    if kind in ("gym", "uvicorn"):
        import uvicorn

        from gym_server.api.http_protocol import http_protocol
        from gym_server.core.settings import HttpSettings

        config = uvicorn.Config(
            trivial_app,
            host=HOST,
            port=port,
            loop="uvloop",
            http=http_protocol(HttpSettings()) if kind == "gym" else "httptools",
            log_level="warning",
            access_log=False,
            proxy_headers=False,
        )
        uvicorn.Server(config).run()
        return

    async def main() -> None:
        if kind == "bare":
            await serve_stub(HOST, port, lifetime_s=3600.0)
            return
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: MinimalAsgiProtocol(loop), HOST, port)
        await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):  # the benchmark stops it with SIGINT
        uvloop.run(main())


async def measure(
    servers: dict[str, tuple[ManagedProcess, int]], rounds: int, requests: int
) -> dict[str, list[float]]:
    """Server CPU µs per request of each server, one burst of `requests` POSTs per server and round.

    All servers are up at once and take turns burst by burst (the order reversed every other round), so
    the machine's drift, which moves one server's readings by a third between runs minutes apart, falls
    on all of them alike."""
    connections: dict[str, tuple[HttpConnection, bytes]] = {}
    for kind, (server, port) in servers.items():
        await wait_ready(port, server, timeout_s=60.0, path="/")  # every server here answers any path 200
        connection = HttpConnection(HOST, port)
        data = connection.render("POST", "/v1/sessions/s1/step", _BODY)
        for _ in range(requests):  # warm-up
            await connection.send(data)
        connections[kind] = (connection, data)
    results: dict[str, list[float]] = {kind: [] for kind in servers}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("bursts", total=rounds * len(servers))
        for round_number in range(rounds):
            order = list(servers) if round_number % 2 == 0 else list(reversed(servers))
            for kind in order:
                connection, data = connections[kind]
                pid = servers[kind][0].pid
                before = sum(thread_cpu_seconds(pid))
                for _ in range(requests):
                    response = await connection.send(data)
                    if response.status != 200:
                        raise RuntimeError(f"{kind}: unexpected answer {response.status} {response.body!r}")
                results[kind].append((sum(thread_cpu_seconds(pid)) - before) / requests * 1e6)
                progress.advance(task)
    for connection, _ in connections.values():
        await connection.close()
    return results


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="requests per burst")
    parser.add_argument("--rounds", type=int, default=40, help="bursts per server, the servers taking turns")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    machine = machine_description()
    console.print(", ".join(f"{key} {value}" for key, value in machine.items()))
    pin(os.getpid(), LOADGEN_CORE)
    servers: dict[str, tuple[ManagedProcess, int]] = {}
    with tempfile.TemporaryDirectory(prefix="gym-http-floor-") as logs:
        try:
            for kind in KINDS:
                port = free_port()
                argv = [sys.executable, __file__, "--serve", kind, str(port)]
                server = ManagedProcess(kind, argv, env=dict(os.environ), cwd=REPO, log=Path(logs) / kind)
                servers[kind] = (server, port)
                server.start(SERVER_CORE)
            results = asyncio.run(measure(servers, args.rounds, args.requests))
        finally:
            for server, _ in servers.values():
                server.stop()
    uvicorn_us = results["uvicorn"]
    table = Table(
        title=f"Server CPU µs per request, one client ({args.rounds} bursts of {args.requests} per server)"
    )
    for column in ("server", "median µs", "quartiles µs", "÷ uvicorn's (median of bursts)"):
        table.add_column(column, justify="right")
    for kind, label in KINDS.items():
        values = results[kind]
        low, _, high = statistics.quantiles(values, n=4)
        ratio = statistics.median(value / base for value, base in zip(values, uvicorn_us, strict=True))
        table.add_row(label, f"{statistics.median(values):.1f}", f"{low:.1f}-{high:.1f}", f"{ratio:.3f}")
    console.print(table)
    console.print(f"load average at the end: {' / '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main(sys.argv[1:])
