"""How long listing a slow generator's tasks takes (issue 37, item 12): `GET /v1/environments/
reasoning_gym/puzzle24/tasks?limit=1000` on a server that never listed it (an empty task cache), again in
the same server, and in a restarted server (a new process, the cache on disk), with the event loop's
worst lag while the first listing ran.

Each server is a child process of this script (the app through httpx's ASGI transport, SQLite and
`GYM_HOME` in a temporary directory), so a restart really starts from nothing in memory.

    python benchmarks/task_listing.py                          # puzzle24, 1,000 tasks
    python benchmarks/task_listing.py --generator leg_counting --limit 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from gym_server.app import create_app
from gym_server.core.settings import Settings

RESULT = "listing-result: "


async def _lag_while(work: Any) -> tuple[Any, float]:
    """(work's result, the worst delay of a 10 ms ticker on the loop while it ran, in seconds)."""
    worst = 0.0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - before - 0.01)

    ticker = asyncio.create_task(tick())
    try:
        return await work, worst
    finally:
        done.set()
        await ticker


async def server(generator: str, limit: int, calls: int, home: Path) -> list[dict[str, float]]:
    """One server's listings: seconds and loop lag per call (run in a child process)."""
    store = {"url": f"sqlite:///{home / 'gym.db'}"}
    # Warmed before serving, as the issue measured: the listing alone, not the catalog's warm-up beside it.
    settings = Settings(server_name="bench-listing", store=store, catalog_warmup="before_serving")
    app = create_app(settings)
    path = f"/v1/environments/reasoning_gym/{generator}/tasks?limit={limit}"
    results = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://localhost", timeout=None
        ) as client:
            for _ in range(calls):
                clock = time.perf_counter()
                response, lag = await _lag_while(client.get(path))
                response.raise_for_status()
                assert len(response.json()["tasks"]) == limit
                results.append({"seconds": time.perf_counter() - clock, "lag_s": lag})
    return results


def _child(generator: str, limit: int, calls: int, home: Path) -> list[dict[str, float]]:
    env = {**os.environ, "GYM_HOME": str(home), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        __file__,
        "--child",
        str(calls),
        "--generator",
        generator,
        "--limit",
        str(limit),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    # The warm-up may print to stdout too: the result is what follows the last marker.
    result: list[dict[str, float]] = json.loads(done.stdout[done.stdout.rindex(RESULT) + len(RESULT) :])
    return result


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generator", default="puzzle24")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        home = Path(os.environ["GYM_HOME"])
        print(RESULT + json.dumps(asyncio.run(server(args.generator, args.limit, args.child, home))))
        return
    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="bench-listing-") as folder:
        home = Path(folder)
        first, again = _child(args.generator, args.limit, 2, home)
        (restarted,) = _child(args.generator, args.limit, 1, home)
    rows = [("first listing (nothing cached)", first), ("again, same server", again)]
    rows.append(("restarted server (cache on disk)", restarted))
    print(f"GET /v1/environments/reasoning_gym/{args.generator}/tasks?limit={args.limit}")
    print(f"cores {len(os.sched_getaffinity(0))}; load average before {load_before}, after {_load()}")
    print(f"| {'listing':<34} | {'seconds':>8} | {'worst loop lag (s)':>18} |")
    print(f"|{'-' * 36}|{'-' * 10}|{'-' * 20}|")
    for name, result in rows:
        print(f"| {name:<34} | {result['seconds']:>8.2f} | {result['lag_s']:>18.3f} |")


if __name__ == "__main__":
    main()
