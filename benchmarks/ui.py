"""Rollout inspector benchmark: server time per page of `/ui` on a generated store of N trajectories.

It generates a store (SQLite file by default, or `--url` a PostgreSQL database) of N trajectories spread
over runs, environments, tasks, policies and 30 days, with a small transcript and a tool call each (a
re-score on one in a hundred), upgraded to the newest schema (the inspector's indexes included). Then
it serves the gym's app in this process (its lifespan run as `gym-server serve` runs it) and requests
each page `--repeats` times through httpx's ASGI transport, reading the server's own time from the
`Server-Timing` header the inspector sets. The target: every page under 300 ms at N = 1,000,000.

    python benchmarks/ui.py --n 20000                 # a smoke run (seconds)
    python benchmarks/ui.py --n 1000000 --db var/bench/ui-1m.sqlite   # the full run (generation: minutes)
    python benchmarks/ui.py --n 20000 --writer   # and what the inspector's indexes and totals cost the writer
    python benchmarks/ui.py --n 20000 --keyed    # keys on: every page scoped to the rows' tenant

A store already at the path with N rows is reused (`--db`), so a second run only measures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from gym_server.app import create_app
from gym_server.auth.keystore import create_key
from gym_server.core.settings import Settings
from gym_server.store.migrate import make_engine, upgrade_database
from gym_server.store.models import rescores_table, trajectories_table
from gym_server.store.records import DEFAULT_TENANT, TrajectoryRecord
from gym_server.store.repository import upsert_trajectories

ENVS = ("math", "tool_call", "humaneval")
POLICIES = ("tiny-a", "tiny-b")
FAILURES = ("sandbox_timeout", "verify_timeout", "policy_error", "max_turns")
TASKS = 500
BATCH = 5_000
START = datetime(2026, 10, 1, tzinfo=UTC)
# `--writer` measures the upsert rate before the inspector's indexes (0002), before the per-task totals
# and their triggers (0003), and at head.
WRITER_REVISIONS = ("0002", "0003", "head")


def _row(index: int, runs: int, n: int, rng: random.Random) -> dict[str, Any]:
    run = index % runs
    env = ENVS[run % len(ENVS)]
    progress = index / n  # rewards improve over the store's 30 days
    failed = rng.random() < 0.05
    reward = None if failed else (1.0 if rng.random() < 0.3 + progress * 0.5 else 0.0)
    call = {
        "id": f"c{index}",
        "type": "function",
        "function": {"name": "run_python", "arguments": '{"code": "print(1)"}'},
    }
    return {
        "id": f"t{index:09d}",
        "run": f"run-{run:04d}",
        "env": env,
        "env_version": f"{env}-v{1 + run % 2}",
        "task_id": f"{env}-{rng.randrange(TASKS):05d}",
        "seed": index,
        "status": "failed" if failed else "completed",
        "failure": FAILURES[index % len(FAILURES)] if failed else None,
        "done_reason": None,
        "messages": [
            {"role": "user", "content": f"task {index}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{index}", "content": "1"},
            {"role": "assistant", "content": "done"},
        ],
        "tools": [],
        "reward": reward,
        "components": {} if reward is None else {"correct": reward},
        "verify_info": {},
        "verifier_version": f"v{1 + run % 3}",
        "policy": {"model": POLICIES[run % 2], "weight_version": str(index // 50_000)},
        "turns": [],
        "timings": {},
        "metadata": {},
        "num_turns": 2,
        "server_name": "bench",
        "created_at": START + timedelta(seconds=index * 2_592_000 / n),
        "finished_at": None,
    }


def generate(url: str, n: int, seed: int = 0) -> float:
    """Fill an upgraded store with `n` trajectories (runs of about 10,000); returns seconds spent."""
    upgrade_database(url)
    engine = make_engine(url)
    runs = max(1, min(100, n // 10_000))
    rng = random.Random(seed)
    started = time.perf_counter()
    try:
        with engine.connect() as connection:
            have = connection.execute(select(func.count()).select_from(trajectories_table)).scalar_one()
            if have == n:
                return 0.0
            if have:
                raise SystemExit(f"the store holds {have} trajectories, not {n}: remove it or pick another")
            for first in range(0, n, BATCH):
                rows = [_row(index, runs, n, rng) for index in range(first, min(n, first + BATCH))]
                connection.execute(insert(trajectories_table), rows)
                rescored = [row for row in rows[::100] if row["reward"] is not None]
                connection.execute(
                    insert(rescores_table),
                    [
                        {
                            "trajectory_id": row["id"],
                            "reward": 1.0 - row["reward"],
                            "components": {"correct": 1.0 - row["reward"]},
                            "info": {},
                            "failure": None,
                            "verifier_version": "v9",
                            "previous_reward": row["reward"],
                            "previous_verifier_version": row["verifier_version"],
                            "created_at": row["created_at"] + timedelta(days=1),
                        }
                        for row in rescored
                    ],
                )
                connection.commit()
    finally:
        engine.dispose()
    return time.perf_counter() - started


def writer_cost(revision: str, n: int = 20_000, batch: int = 256) -> tuple[float, float]:
    """The store's own upsert (`repository.upsert_trajectories`, batches as the writer commits them) into
    a fresh SQLite file at `revision`: what the indexes and triggers of a revision cost the trajectory
    writer, in CPU microseconds per row (SQLite runs in this process, so its work counts, and other jobs
    on a shared machine move it least). Two costs: new rows (an episode's first write), then every row
    again with another reward (a close or a re-score)."""
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch) / 'writer.sqlite'}"
        upgrade_database(url, revision)
        engine = make_engine(url)
        try:
            rng = random.Random(0)
            records = [TrajectoryRecord(**_row(index, 2, n, rng)) for index in range(n)]
            rescored = [
                record.model_copy(update={"reward": 1.0 - (record.reward or 0.0)}) for record in records
            ]
            return _upsert_cpu_us(engine, records, batch), _upsert_cpu_us(engine, rescored, batch)
        finally:
            engine.dispose()


def _upsert_cpu_us(engine: Engine, records: list[TrajectoryRecord], batch: int) -> float:
    started = time.process_time()
    for first in range(0, len(records), batch):
        with Session(engine) as session, session.begin():
            upsert_trajectories(session, records[first : first + batch])
    return (time.process_time() - started) * 1e6 / len(records)


async def measure(url: str, repeats: int, keyed: bool) -> list[tuple[str, list[float]]]:
    """Server milliseconds per request of each page, as `Server-Timing` reports them.

    `keyed`: keys on and a `read` key of the tenant every generated row belongs to, so every read is
    scoped by tenant (and matches the whole store).
    """
    auth: dict[str, Any] = {"mode": "on" if keyed else "off"}
    settings = Settings(store={"url": url}, sandbox={"backend": "unsafe-no-sandbox"}, auth=auth)
    headers = {}
    if keyed:
        engine = make_engine(url)
        try:
            headers["Authorization"] = f"Bearer {create_key(engine, DEFAULT_TENANT, ['read'])[1]}"
        finally:
            engine.dispose()
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://localhost", headers=headers
        ) as client:
            first = (await client.get("/ui/trajectories")).text
            cursor_page = await _deep_cursor(client, hops=20)
            pages = [
                "/ui/runs",
                "/ui/runs?page=2",
                "/ui/runs?env=math&policy=tiny-a",
                "/ui/runs?policy=tiny-b",
                "/ui/runs?verifier_version=v2",
                "/ui/runs?since=2026-10-10&until=2026-10-12",
                "/ui/trajectories",
                "/ui/trajectories?run=run-0003",
                "/ui/trajectories?env=tool_call&status=failed",
                cursor_page,
                "/ui/trajectories/t000000100",
                "/ui/compare?a=run-0000&b=run-0002",
                "/ui/compare?by=policy&a=tiny-a&b=tiny-b&env=math",
                "/ui/compare?by=policy&a=tiny-a&b=tiny-b",
                # A date range the totals do not keep: the per-task means come from the rows themselves.
                "/ui/compare?by=policy&a=tiny-a&b=tiny-b&since=2026-10-01&until=2026-10-31",
                "/ui/live",
            ]
            assert "t0" in first, "the store is empty"
            results = []
            for page in pages:
                times = []
                for _ in range(repeats):
                    response = await client.get(page)
                    response.raise_for_status()
                    times.append(float(response.headers["server-timing"].split("dur=")[1]))
                results.append((page, times))
            return results


async def _deep_cursor(client: httpx.AsyncClient, hops: int) -> str:
    """The URL of the trajectory list `hops` pages deep, by following its keyset `next page` links."""
    url = "/ui/trajectories"
    for _ in range(hops):
        text = (await client.get(url)).text
        marker = 'id="next-page"'
        if marker not in text:
            break
        link = text[: text.index(marker)].rsplit('href="', 1)[1].split('"', 1)[0]
        url = "/ui/trajectories" + link.replace("&amp;", "&")
    return url


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000, help="trajectories in the store")
    parser.add_argument("--db", type=Path, help="SQLite file to create or reuse (default: a temporary one)")
    parser.add_argument("--url", help="a database URL instead (PostgreSQL), used as is")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keyed", action="store_true", help="keys on: every page scoped to a tenant")
    parser.add_argument(
        "--writer",
        action="store_true",
        help="also the writer's upsert rate before and after the inspector's indexes and totals",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.url or f"sqlite:///{args.db or Path(scratch) / 'ui.sqlite'}"
        seconds = generate(url, args.n)
        print(f"store: {args.n:,} trajectories, generated in {seconds:.1f} s ({url.split('://')[0]})")
        load = os.getloadavg()
        results = asyncio.run(measure(url, args.repeats, args.keyed))
        load_after = os.getloadavg()
    print(
        f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cpus, "
        f"python {platform.python_version()}"
    )
    print(
        f"load average (1/5/15 min) before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"after: {load_after[0]:.2f}"
    )
    print(f"{'page':76} {'median ms':>10} {'max ms':>8}")
    worst = 0.0
    for page, times in results:
        worst = max(worst, statistics.median(times))
        print(f"{page[:76]:76} {statistics.median(times):10.1f} {max(times):8.1f}")
    print(f"slowest page median: {worst:.1f} ms (target < 300 ms)")
    if args.writer:
        # Alternating rounds, so a change of load hits every revision alike.
        costs: dict[str, list[tuple[float, float]]] = {revision: [] for revision in WRITER_REVISIONS}
        for _ in range(5):
            for revision in costs:
                costs[revision].append(writer_cost(revision))
        for revision, values in costs.items():
            inserts = statistics.median(value[0] for value in values)
            rescores = statistics.median(value[1] for value in values)
            print(
                f"writer at {revision}: {inserts:.1f} us CPU per new row ({1e6 / inserts:,.0f} rows/s of "
                f"CPU), {rescores:.1f} us per row re-upserted with a new reward (medians of 5)"
            )


if __name__ == "__main__":
    main()
