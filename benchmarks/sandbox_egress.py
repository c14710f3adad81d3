"""What sandbox egress costs: a warm exec with and without an allow-list, and a GET through the proxy.

Per backend (bubblewrap, Docker): the p50 of `true` in a started sandbox without egress and with one
entry (the forwarder starts before each command), and the p50 of a `python3` urllib GET of a loopback
HTTP server through the proxy against the same `python3` doing nothing.

    python benchmarks/sandbox_egress.py --n 30
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import socketserver
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from gym_server.core.egress_policy import EgressPolicy
from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.docker import DockerBackend
from gym_server.sandbox.protocol import Limits, SandboxBackend

GET = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10).read()"


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def p50_ms(action: Callable[[], Awaitable[Any]], n: int) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        result = await action()
        times.append(time.perf_counter() - started)
        assert result.exit_code == 0, result.text("stderr")
    return statistics.median(times) * 1000


async def bench(kind: str, port: int, n: int) -> dict[str, float] | None:
    name = f"bench-egress-{uuid.uuid4().hex[:6]}"
    backend: SandboxBackend = (BubblewrapBackend if kind == "bubblewrap" else DockerBackend)(server_name=name)
    try:
        await backend.check()
    except SandboxUnavailable as exc:
        print(f"{kind}: unavailable ({exc.detail})")
        await backend.aclose()
        return None
    url = f"http://127.0.0.1:{port}/"
    try:
        offline = await backend.start(Limits(timeout_s=20))
        online = await backend.start(
            Limits(timeout_s=20), egress=EgressPolicy.from_entries([f"127.0.0.1:{port}"])
        )
        try:
            return {
                "true_offline": await p50_ms(lambda: offline.exec(["true"]), n),
                "true_egress": await p50_ms(lambda: online.exec(["true"]), n),
                "python_offline": await p50_ms(lambda: offline.exec(["python3", "-c", "pass"]), n),
                "python_get": await p50_ms(lambda: online.exec(["python3", "-c", GET, url]), n),
            }
        finally:
            await offline.close()
            await online.close()
    finally:
        await backend.aclose()


async def main(n: int) -> None:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("| backend | `true` offline | `true` with egress | `python3 -c pass` offline | GET via proxy |")
    print("|---|---:|---:|---:|---:|")
    try:
        for kind in ("bubblewrap", "docker"):
            r = await bench(kind, int(server.server_address[1]), n)
            if r is not None:
                print(
                    f"| {kind} | {r['true_offline']:.1f} ms | {r['true_egress']:.1f} ms | "
                    f"{r['python_offline']:.1f} ms | {r['python_get']:.1f} ms |"
                )
    finally:
        server.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30, help="execs per measurement (p50 of these)")
    asyncio.run(main(parser.parse_args().n))
