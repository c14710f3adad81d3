"""Memory given back: server RSS before, at the peak and after closing many sessions with large transcripts.

Issue 17 item 9: a server that held 1 MB transcripts kept its peak RSS after their sessions closed,
because glibc's dynamic mmap threshold moved megabyte blocks onto the heap, which it seldom returns.
`gym-server serve` now fixes the threshold (gym_server/cli/serve.py). This script runs a real server
(SQLite in a temporary directory), opens N sessions concurrently, sends one step of S MB to each, closes
them all, waits for the writer to drain, and prints RSS at each point with the machine it ran on.

    python benchmarks/memory.py                      # 1,000 sessions of 1 MB
    python benchmarks/memory.py --sessions 200 --size-mb 2

Every loop is bounded; the server is stopped on exit, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _sessions_system import ManagedProcess, free_port, machine_description, proc_rss_mb

REPO = Path(__file__).resolve().parent.parent
CONCURRENCY = 16


async def _wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=url) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"server at {url} did not become ready in {timeout_s:.0f} s")


async def _measure(url: str, pid: int, sessions: int, size_mb: float) -> dict[str, float]:
    payload = "x" * int(size_mb * 1024 * 1024)
    gate = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def episode(index: int) -> str:
            async with gate:
                created = await client.post(
                    "/v1/sessions", json={"env": "counter", "task_id": "counter-0000"}
                )
                created.raise_for_status()
                session_id = str(created.json()["session_id"])
                message = {"role": "assistant", "content": f"{payload}{index}"}
                stepped = await client.post(f"/v1/sessions/{session_id}/step", json={"message": message})
                stepped.raise_for_status()
                return session_id

        async def close(session_id: str) -> None:
            async with gate:
                (await client.delete(f"/v1/sessions/{session_id}")).raise_for_status()

        for index in range(3):  # warm every code path
            await close(await episode(index))
        baseline = proc_rss_mb(pid)
        started = time.monotonic()
        ids = await asyncio.gather(*(episode(i) for i in range(sessions)))
        peak = proc_rss_mb(pid)
        await asyncio.gather(*(close(session_id) for session_id in ids))
        closed_s = time.monotonic() - started
        await asyncio.sleep(2.0)  # closes are committed when acknowledged; let the allocator settle
        after = proc_rss_mb(pid)
        await asyncio.sleep(10.0)  # `serve` hands freed heap pages back every 10 s
        trimmed = proc_rss_mb(pid)
    return {"baseline": baseline, "peak": peak, "after": after, "trimmed": trimmed, "seconds": closed_s}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--size-mb", type=float, default=1.0)
    args = parser.parse_args()
    machine = machine_description()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {
            **os.environ,
            "GYM_DATABASE_URL": f"sqlite:///{tmp}/gym.db",
            "GYM_SERVER_NAME": f"memory-bench-{port}",
            "GYM_SESSIONS__MAX_SESSIONS": str(max(args.sessions + 16, 10_000)),
            # The catalog's first-use work (reasoning-gym's imports: 70 MB and more) done before the
            # server listens, not in the background while the baseline is read.
            "GYM_CATALOG_WARMUP": "before_serving",
        }
        argv = [sys.executable, "-m", "gym_server.cli.main", "serve", "--port", str(port)]
        server = ManagedProcess("gym-server", argv, env=env, cwd=REPO, log=Path(tmp) / "server.log")
        server.start(core=None)
        try:
            url = f"http://127.0.0.1:{port}"
            asyncio.run(_wait_ready(url))
            result = asyncio.run(_measure(url, server.pid, args.sessions, args.size_mb))
        finally:
            server.stop()
    print(f"machine: {machine['cpu']}, {machine['cores']} cores, {machine['ram']}, load {machine['load']}")
    print(f"git {machine['git']}, {machine['date']}")
    print(f"{args.sessions} sessions with a {args.size_mb:g} MB step each, {CONCURRENCY} at a time\n")
    print(f"| {'server RSS':<36} | {'MB':>8} |")
    print(f"|{'-' * 38}|{'-' * 10}|")
    rows = [
        ("before (3 warm-up episodes)", result["baseline"]),
        ("every session open (peak)", result["peak"]),
        ("all closed, 2 s later", result["after"]),
        ("all closed, 12 s later", result["trimmed"]),
        ("left over the baseline, 12 s later", result["trimmed"] - result["baseline"]),
    ]
    for name, value in rows:
        print(f"| {name:<36} | {value:>8.0f} |")
    print(f"\nopen + step + close of all sessions took {result['seconds']:.1f} s")


if __name__ == "__main__":
    main()
