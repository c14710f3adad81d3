"""What the episode gateway costs (issue 27): its overhead per chat call, as p50 and as a share of the
upstream's own latency, at 1 and 16 concurrent agents, and the memory a live recorded episode holds.

A real `gym-server serve` (SQLite in a temporary directory) and a local upstream (`peers/chat_echo.py`:
an answer with 600 prompt ids and 40 sampled ids with logprobs, at once or after
`--upstream-latency-ms`) run as processes of their own. Each round, at each level, the same agents
make the same calls twice, one path after the other: straight to the upstream and through their
episodes' gateway URLs (each agent its own episode), the direct path first in even rounds and the
gateway first in odd ones, so drift and order touch both alike. Each agent has its own HTTP client
(httpx, as the OpenAI SDK), as an agent process with its own OpenAI client would, holding its
connection to the upstream and to its gateway: one client shared by all agents made every request
scan the pool's connections to both servers (httpcore polls each idle one), and the pool held 2
connections during the first 16-agent direct phase but 16 more in every later phase, which made the
direct path alone cheaper to call (docs/benchmarks.md#episode-gateway). The overhead is the difference
of the two paths' p50 latencies, each call timed to the end of its body, whole or streamed; the gym's
own accounting (`gateway_ms` in each call's record: its time beyond the upstream's) is reported beside
it, and so are the CPU seconds per call of the gym (through the gateway), of the upstream and of the
agents' HTTP clients (both called directly), read from /proc: what a call costs whatever else the
machine runs, where latencies on a shared machine measure its load. With 2 cores or more the gym runs
pinned to core 0, the upstream and the agents to core 1: 16 agents in a closed loop keep core 1 busy
against an instant upstream, and a call's latency is then 16 x the CPU core 1 spends per call.
Memory: the gym's RSS before and after opening episodes that each hold recorded calls, per episode.
Targets (issue 27): <= 1 ms p50 and <= 5 % of the upstream's latency at 16 agents.

    python benchmarks/gateway.py                          # 2 rounds of 40 calls per agent
    python benchmarks/gateway.py --upstream-latency-ms 20 # an upstream answering after 20 ms
    python benchmarks/gateway.py --quick                  # 1 round of 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from _sessions_system import (
    LOADGEN_CORE,
    REPO,
    SERVER_CORE,
    ManagedProcess,
    free_port,
    machine_description,
    pin,
    proc_rss_mb,
)

PEERS = Path(__file__).resolve().parent / "peers"
MESSAGES = [
    {"role": "system", "content": "You are a careful agent. Use the tools, then submit."},
    {"role": "user", "content": "Bring the counter to 26. It starts at 20."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"amount": 4}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "24"},
]


@dataclass(slots=True)
class Row:
    agents: int
    stream: bool
    direct_p50_ms: float
    gateway_p50_ms: float
    recorded_ms: float  # p50 of the gym's own `gateway_ms`
    gym_cpu_ms: float  # the gym's CPU per call through the gateway
    upstream_cpu_ms: float  # the upstream's CPU per call made directly
    agent_cpu_ms: float  # the agents' (this process's) CPU per call made directly: their HTTP client

    @property
    def overhead_ms(self) -> float:
        return self.gateway_p50_ms - self.direct_p50_ms

    @property
    def share(self) -> float:
        return self.overhead_ms / self.direct_p50_ms


async def wait_ready(url: str, process: ManagedProcess, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            if not process.alive():
                raise SystemExit(f"{process.name} exited:\n{process.log_tail()}")
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"{process.name} not ready after {timeout_s:g} s")


async def agent(
    client: httpx.AsyncClient, url: str, calls: int, stream: bool, start_s: float = 0.0
) -> list[float]:
    """One agent's calls, one after another, the first after `start_s`; each call's latency in ms (a
    stream read to its end)."""
    body: dict[str, Any] = {"model": "echo", "messages": MESSAGES, "stream": stream}
    latencies = []
    await asyncio.sleep(start_s)
    for _ in range(calls):
        started = time.perf_counter()
        response = await client.post(url, json=body)
        response.raise_for_status()
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process's threads ran, to the nanosecond (/proc/<pid>/task/*/schedstat; stat's
    clock ticks are 10 ms, a hundred calls' worth); threads that ended meanwhile are not counted."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


@dataclass(frozen=True, slots=True)
class Pids:
    gym: int
    upstream: int


@dataclass(frozen=True, slots=True)
class Level:
    """One level of a round: how many agents make how many calls, streamed or not, which path first."""

    agents: int
    calls: int
    stream: bool
    gateway_first: bool
    # Agent i starts its calls i/agents of this after the first: against an upstream that answers
    # after a fixed time, agents that all start at once stay in step (all their answers come at
    # once, and queue on the core), which independent agents are not.
    spread_s: float = 0.0

    def start_s(self, i: int) -> float:
        return i * self.spread_s / self.agents


async def level(
    client: httpx.AsyncClient,
    agent_clients: list[httpx.AsyncClient],
    gym: str,
    upstream: str,
    pids: Pids,
    at: Level,
) -> Row:
    """One level's two paths, in `at`'s order: `client` opens and closes the episodes, agent i calls
    with `agent_clients[i]` on both paths."""
    mine = agent_clients[: at.agents]
    episodes = [await open_episode(client, gym, upstream) for _ in range(at.agents)]

    async def direct() -> tuple[list[list[float]], float, float]:
        upstream_cpu, agent_cpu = cpu_seconds(pids.upstream), time.process_time()
        url = f"{upstream}/v1/chat/completions"
        latencies = await asyncio.gather(
            *(agent(c, url, at.calls, at.stream, at.start_s(i)) for i, c in enumerate(mine))
        )
        return latencies, cpu_seconds(pids.upstream) - upstream_cpu, time.process_time() - agent_cpu

    async def through() -> tuple[list[list[float]], float]:
        gym_cpu = cpu_seconds(pids.gym)
        urls = [f"{e['gateway']['base_url']}/chat/completions" for e in episodes]
        latencies = await asyncio.gather(
            *(
                agent(c, u, at.calls, at.stream, at.start_s(i))
                for i, (c, u) in enumerate(zip(mine, urls, strict=True))
            )
        )
        return latencies, cpu_seconds(pids.gym) - gym_cpu

    if at.gateway_first:
        (through_ms, gym_cpu), (direct_ms, upstream_cpu, agent_cpu) = await through(), await direct()
    else:
        (direct_ms, upstream_cpu, agent_cpu), (through_ms, gym_cpu) = await direct(), await through()
    agents, calls = at.agents, at.calls
    recorded: list[float] = []
    for episode in episodes:
        (await client.delete(f"{gym}/v1/sessions/{episode['session_id']}")).raise_for_status()
        record = (await client.get(f"{gym}/v1/rollouts/{episode['session_id']}")).json()
        recorded += [turn["gateway_ms"] for turn in record["turns"] if turn.get("source") == "gateway"]
    return Row(
        agents,
        at.stream,
        statistics.median(x for xs in direct_ms for x in xs),
        statistics.median(x for xs in through_ms for x in xs),
        statistics.median(recorded),
        gym_cpu * 1000 / (agents * calls),
        upstream_cpu * 1000 / (agents * calls),
        agent_cpu * 1000 / (agents * calls),
    )


async def open_episode(client: httpx.AsyncClient, gym: str, upstream: str) -> dict[str, Any]:
    body = {"env": "counter", "gateway": {"upstream": upstream, "model": "echo"}}
    response = await client.post(f"{gym}/v1/sessions", json=body)
    response.raise_for_status()
    return dict(response.json())


async def memory(
    client: httpx.AsyncClient, gym: str, upstream: str, pid: int, episodes: int, calls: int
) -> tuple[float, int]:
    """MB of gym RSS per live episode holding `calls` recorded calls, and the JSON bytes of its turns."""
    before = proc_rss_mb(pid)
    opened = [await open_episode(client, gym, upstream) for _ in range(episodes)]
    for episode in opened:
        await agent(client, f"{episode['gateway']['base_url']}/chat/completions", calls, False)
    after = proc_rss_mb(pid)
    for episode in opened:
        await client.delete(f"{gym}/v1/sessions/{episode['session_id']}")
    record = (await client.get(f"{gym}/v1/rollouts/{opened[0]['session_id']}")).json()
    size = len(httpx.Response(200, json=record["turns"]).content)
    return (after - before) / episodes, size


async def measure(
    args: argparse.Namespace, gym: str, upstream: str, pids: Pids
) -> tuple[list[Row], tuple[float, int]]:
    spread_s = args.upstream_latency_ms / 1000
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=60))
        agent_clients = [await stack.enter_async_context(httpx.AsyncClient(timeout=60)) for _ in range(16)]
        # Warm-up: every agent's connections to both servers, first imports.
        await level(client, agent_clients, gym, upstream, pids, Level(16, 2, False, False))
        # First, while the heap is young: later levels leave freed memory that new episodes would reuse.
        mem = await memory(client, gym, upstream, pids.gym, args.episodes, args.calls)
        rows = [
            await level(
                client,
                agent_clients,
                gym,
                upstream,
                pids,
                Level(agents, args.calls, stream, r % 2 == 1, spread_s),
            )
            for r in range(args.rounds)
            for agents in (1, 16)
            for stream in (False, True)
        ]
        return rows, mem


def report(
    rows: list[Row], mem: tuple[float, int], machine: dict[str, str], args: argparse.Namespace, pinned: bool
) -> str:
    lines = [
        f"Episode gateway overhead ({args.rounds} round(s), {args.calls} calls per agent; upstream answers "
        f"after {args.upstream_latency_ms:g} ms; {machine['date']})",
        f"machine: {machine['cpu']}, {machine['cores']} cores, {machine['ram']}; load {machine['load']}; "
        f"git {machine['git']}; "
        + ("gym pinned to core 0, upstream and agents to core 1" if pinned else "not pinned"),
        "",
        "| agents | stream | upstream p50 ms | through gateway p50 ms | overhead p50 ms | share of upstream "
        "| gym's own gateway_ms p50 | gym CPU ms/call | upstream CPU ms/call | agent CPU ms/call |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for agents in (1, 16):
        for stream in (False, True):
            mine = [r for r in rows if (r.agents, r.stream) == (agents, stream)]
            direct = statistics.median(r.direct_p50_ms for r in mine)
            through = statistics.median(r.gateway_p50_ms for r in mine)
            recorded = statistics.median(r.recorded_ms for r in mine)
            gym_cpu = statistics.median(r.gym_cpu_ms for r in mine)
            upstream_cpu = statistics.median(r.upstream_cpu_ms for r in mine)
            agent_cpu = statistics.median(r.agent_cpu_ms for r in mine)
            lines.append(
                f"| {agents} | {stream} | {direct:.2f} | {through:.2f} | {through - direct:.2f} | "
                f"{(through - direct) / direct:.0%} | {recorded:.2f} | {gym_cpu:.3f} | {upstream_cpu:.3f} "
                f"| {agent_cpu:.3f} |"
            )
    per_episode, size = mem
    lines += [
        "",
        f"memory per live episode with {args.calls} recorded calls: {per_episode:.2f} MB of gym RSS "
        f"({args.episodes} episodes; its turns are {size / 1024:.0f} KiB of JSON)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="calls per agent per level")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=32, help="live episodes for the memory reading")
    parser.add_argument(
        "--upstream-latency-ms",
        type=float,
        default=0.0,
        help="the upstream's wait before each answer, as a model's decode (CHAT_ECHO_LATENCY_MS)",
    )
    parser.add_argument("--quick", action="store_true", help="1 round of 10 calls, 8 episodes")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.rounds, args.episodes = 10, 1, 8
    machine = machine_description()
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        gym_port, upstream_port = free_port(), free_port()
        env = {
            **os.environ,
            "GYM_DATABASE_URL": f"sqlite:///{Path(tmp) / 'gym.db'}",
            "GYM_LOG_LEVEL": "warning",
            "GYM_CATALOG_WARMUP": "off",
            "CHAT_ECHO_LATENCY_MS": str(args.upstream_latency_ms),
        }
        upstream = ManagedProcess(
            "chat echo",
            [
                *(sys.executable, "-m", "uvicorn", "--app-dir", str(PEERS), "chat_echo:app"),
                *(
                    "--port",
                    str(upstream_port),
                    "--loop",
                    "uvloop",
                    "--http",
                    "httptools",
                    "--log-level",
                    "warning",
                ),
            ],
            env=env,
            cwd=REPO,
            log=Path(tmp) / "upstream.log",
        )
        gym = ManagedProcess(
            "gym-server",
            [sys.executable, "-m", "gym_server.cli.main", "serve", "--port", str(gym_port)],
            env=env,
            cwd=REPO,
            log=Path(tmp) / "gym.log",
        )
        pinned = (os.cpu_count() or 1) > LOADGEN_CORE
        try:
            upstream.start(LOADGEN_CORE if pinned else None)
            gym.start(SERVER_CORE if pinned else None)
            if pinned:
                pin(os.getpid(), LOADGEN_CORE)
            gym_url, upstream_url = f"http://127.0.0.1:{gym_port}", f"http://127.0.0.1:{upstream_port}"
            asyncio.run(wait_ready(f"{upstream_url}/health", upstream))
            asyncio.run(wait_ready(f"{gym_url}/readyz", gym))
            rows, mem = asyncio.run(measure(args, gym_url, upstream_url, Pids(gym.pid, upstream.pid)))
        finally:
            gym.stop()
            upstream.stop()
    machine["load"] = " / ".join(Path("/proc/loadavg").read_text().split()[:3])  # at the end, too
    print(report(rows, mem, machine, args, pinned))


if __name__ == "__main__":
    main()
