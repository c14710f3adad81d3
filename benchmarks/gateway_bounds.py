"""What the episode gateway's bounds (issue 37) leave an upstream able to cost the gym: the CPU to
assemble a 64k-token stream (one token an event, fed as it arrives), the gym's RSS after 1,000 closed
episodes that each made one call with a long prompt (the per-episode state that outlived them before;
the catalog warmed up before serving, so its imports are not counted as the episodes'),
and the event loop's worst lag while one episode's upstream streams 40 MB (cut at the transcript
budget, 8 MiB).

The gym runs in this process (its app through httpx's ASGI transport, SQLite in a temporary directory),
the upstream in a process of its own (this script with `--upstream`), so the loop's lag is the gym's.

    python benchmarks/gateway_bounds.py                 # 64k tokens, 1,000 episodes, 40 MB
    python benchmarks/gateway_bounds.py --episodes 200  # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from _sessions_system import free_port, machine_description, proc_rss_mb

from gym_server.app import create_app
from gym_server.core.settings import Settings
from gym_server.gateway.record import StreamAssembler

PROMPT_TOKENS = 8192  # a long prompt's ids, in each whole answer


def chunk(content: str, finish: str | None = None) -> bytes:
    choice = {
        "index": 0,
        "delta": {"content": content},
        "token_ids": [7],
        "logprobs": {"content": [{"token": "t", "logprob": -0.5}]},
        "finish_reason": finish,
    }
    return b"data: " + orjson.dumps({"model": "m", "prompt_token_ids": [1, 2], "choices": [choice]}) + b"\n\n"


# -- the upstream, in its own process ------------------------------------------------------------------


async def upstream(port: int) -> None:
    """Whole answers with PROMPT_TOKENS prompt ids; `"stream": true` gets 40 MB of 4 KB events."""
    answer = orjson.dumps(
        {
            "model": "m",
            "prompt_token_ids": list(range(1000, 1000 + PROMPT_TOKENS)),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "done"},
                    "finish_reason": "stop",
                    "token_ids": [7],
                    "logprobs": {"content": [{"token": "t", "logprob": -0.5}]},
                }
            ],
        }
    )
    event = chunk("y" * 4096)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")
                    if b"content-length" in line
                )
                if b'"stream":true' in await reader.readexactly(length):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                    )
                    for _ in range((40 << 20) // len(event)):
                        writer.write(event)
                        await writer.drain()
                    writer.write(chunk("", "stop") + b"data: [DONE]\n\n")
                    await writer.drain()
                    break
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


# -- the measures --------------------------------------------------------------------------------------


def assembly_cpu_s(tokens: int) -> float:
    assembler, one = StreamAssembler(budget=1 << 30), chunk("x")
    started = time.process_time()
    for _ in range(tokens):
        assembler.feed(one)
    return time.process_time() - started


def trimmed_rss_mb() -> float:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return proc_rss_mb(os.getpid())


async def open_episode(client: httpx.AsyncClient, url: str) -> str:
    body = {"env": "counter", "task_id": "counter-0000", "seed": 0, "gateway": {"upstream": url}}
    created = (await client.post("/v1/sessions", json=body)).json()
    return str(created["gateway"]["base_url"])


async def closed_episodes_rss(
    client: httpx.AsyncClient, url: str, episodes: int, marks: tuple[int, ...] = (100, 1000, 2000)
) -> list[tuple[int, float]]:
    """RSS (MB, after `malloc_trim`) after one warm-up episode (0), after each of `marks` below
    `episodes`, and after `episodes` more, each one call then closed: flat after the first ones when
    nothing of a closed episode is kept."""
    prompt = [{"role": "user", "content": "word " * 2000}]

    async def one() -> None:
        base = await open_episode(client, url)
        answered = await client.post(f"{base}/chat/completions", json={"messages": prompt})
        assert answered.status_code == 200, answered.text
        assert (await client.delete(base.rsplit("/openai/", 1)[0])).status_code == 204

    await one()
    readings = [(0, trimmed_rss_mb())]
    for done in range(1, episodes + 1):
        await one()
        if done in marks or done == episodes:
            readings.append((done, trimmed_rss_mb()))
    return readings


async def stream_lag_ms(client: httpx.AsyncClient, url: str) -> tuple[float, int]:
    """The loop's worst lag (ms) over a 1 ms ticker while a 40 MB stream passes, and the bytes the
    agent got."""
    worst = 0.0
    running = True

    async def ticker() -> None:
        nonlocal worst
        loop = asyncio.get_running_loop()
        while running:
            before = loop.time()
            await asyncio.sleep(0.001)
            worst = max(worst, loop.time() - before - 0.001)

    base = await open_episode(client, url)
    ticking = asyncio.create_task(ticker())
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    streamed = await client.post(f"{base}/chat/completions", json=body)
    running = False
    await ticking
    return worst * 1000, len(streamed.content)


async def measure(args: argparse.Namespace, url: str) -> list[tuple[str, str]]:
    rows = [(f"{args.tokens}-token stream: assembly CPU", f"{assembly_cpu_s(args.tokens):.3f} s")]
    await asyncio.sleep(1.0)  # the upstream starting
    with tempfile.TemporaryDirectory() as home:
        # The catalog's warm-up (every installed environment's imports and datasets: ~100 MB with
        # reasoning-gym's) done before serving, not in its default background thread: it ran on during
        # the episodes before and was counted as their growth (+163 MB of 1,000 episodes, 2026-12-07).
        settings = Settings(
            store={"url": f"sqlite:///{Path(home) / 'gym.db'}"}, catalog_warmup="before_serving"
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost", timeout=600
            ) as client:
                readings = await closed_episodes_rss(client, url, args.episodes)
                (_, before), (_, after) = readings[0], readings[-1]
                rows.append(
                    (f"RSS after {args.episodes} closed episodes (8k prompt ids each)", f"{after:.1f} MB")
                )
                rows.append(("  growth over them", f"{after - before:+.1f} MB"))
                rows += [
                    (f"  growth over the first {n}", f"{rss - before:+.1f} MB") for n, rss in readings[1:-1]
                ]
                rows.append(("  closed ids kept for 410 answers", f"{len(app.state.manager._gone)}"))
                rows.append(("  gateway state left", repr(app.state.gateways)))
                lag, passed = await stream_lag_ms(client, url)
                rows.append(("40 MB stream: worst event-loop lag", f"{lag:.1f} ms"))
                rows.append(("  bytes passed to the agent (budget 8 MiB)", f"{passed / 2**20:.1f} MiB"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=65536)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        asyncio.run(upstream(args.upstream))
        return
    rows: list[tuple[str, Any]] = list(machine_description().items())
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--upstream", str(port)])
    try:
        rows += asyncio.run(measure(args, f"http://127.0.0.1:{port}/v1"))
    finally:
        server.terminate()
        server.wait()
    rows.append(("load average after", " ".join(f"{x:.2f}" for x in os.getloadavg())))
    width = max(len(name) for name, _ in rows)
    print(f"| {'what':<{width}} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")


if __name__ == "__main__":
    main()
