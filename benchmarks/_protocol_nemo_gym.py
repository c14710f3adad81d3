"""The NeMo Gym path of the protocol benchmark: episodes through `/v1/environments/{env}/nemo-gym`.

An episode is what NeMo Gym's simple agent sends a resources server: `POST /seed_session` (its answer
sets the episode's cookie), one `POST /{tool}` per tool call with the arguments as the body, each sent
with the cookie of the previous answer, and `POST /verify` (which also closes and stores the episode, so
there is no DELETE). The steps are the session benchmark's (`add` with amount 1 on `counter`), over the
same raw HTTP/1.1 client (`_loadgen.HttpConnection`), so the numbers compare with the native path's.

`episode` plays one; `benchmarks/protocols.py` drives it in its levels. Run alone, this module is a
smoke test against a server already listening (`python benchmarks/_protocol_nemo_gym.py --port P
--clients 2 --duration 2`): it prints steps/s, p50 and p99 of each call and the errors.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from _loadgen import HttpConnection, HttpError, Response, error_kind, percentile, run

__all__ = ["COOKIE", "Call", "episode", "with_cookie"]

HOST = "127.0.0.1"
ENV = "counter"
COUNTER_TASKS = 60  # counter-0000 .. counter-0059
COOKIE = b"gym_server_nemo_gym"
STEP_BODY = b'{"amount":1}'
# What NeMo Gym's agent sends to /verify: the run request and the model's response (no final answer).
VERIFY_BODY = b'{"responses_create_params":{"input":[]},"response":{"output":[]}}'

# `call(kind, request bytes, expected status)`: send, time and count one request (None on any error),
# as the session benchmark's client does.
Call = Callable[[str, bytes, int], Awaitable[Response | None]]


def with_cookie(data: bytes, cookie: bytes) -> bytes:
    """A rendered request with a `Cookie` header after its request line."""
    line_end = data.index(b"\r\n") + 2
    return data[:line_end] + b"Cookie: " + cookie + b"\r\n" + data[line_end:]


def _cookie(response: Response) -> bytes | None:
    """`name=value` of the episode's cookie in a response's `Set-Cookie`, or None."""
    header = response.headers.get("set-cookie", "").encode("latin-1")
    pair = header.split(b";", 1)[0]
    return pair if pair.startswith(COOKIE + b"=") else None


async def episode(
    conn: HttpConnection,
    call: Call,
    *,
    index: int,
    steps: int,
    deadline: float,
    clock: Callable[[], float] = time.perf_counter,
) -> bool:
    """Play one episode of `steps` tool calls on `conn`; True when its verify answered 200.

    Call kinds: `reset` (seed_session), `step` (a tool call), `verify` (score, close and store). A step
    that fails ends the episode early; verify is always sent once the episode is seeded, also past the
    deadline, so a level leaves no sessions behind (as the native path always closes).
    """
    base = f"/v1/environments/{ENV}/nemo-gym"
    seed = f'{{"task_id":"counter-{index % COUNTER_TASKS:04d}","seed":{index}}}'.encode()
    seeded = await call("reset", conn.render("POST", f"{base}/seed_session", seed), 200)
    cookie = _cookie(seeded) if seeded is not None else None
    if cookie is None:
        return False
    step_data = with_cookie(conn.render("POST", f"{base}/add", STEP_BODY), cookie)
    for _ in range(steps):
        if clock() >= deadline:
            break
        stepped = await call("step", step_data, 200)
        if stepped is None:
            break
        cookie = _cookie(stepped) or cookie  # the agent sends the last answer's cookie
    verified = await call(
        "verify", with_cookie(conn.render("POST", f"{base}/verify", VERIFY_BODY), cookie), 200
    )
    return verified is not None


# -- the smoke run -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Smoke:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"reset": [], "step": [], "verify": []})
    errors: Counter[str] = field(default_factory=Counter)
    episodes: int = 0


async def _smoke(port: int, clients: int, duration: float, steps: int) -> _Smoke:
    result = _Smoke()
    deadline = time.perf_counter() + duration

    async def client(index: int) -> None:
        conn = HttpConnection(HOST, port, timeout_s=30.0)

        async def call(kind: str, data: bytes, expect: int) -> Response | None:
            began = time.perf_counter()
            try:
                response = await conn.send(data)
            except Exception as exc:
                result.errors[f"{kind}: {error_kind(exc)}"] += 1
                return None
            if response.status != expect:
                result.errors[f"{kind}: {error_kind(HttpError(response, expect))}"] += 1
                return None
            result.latencies[kind].append(time.perf_counter() - began)
            return response

        try:
            episodes = 0
            while time.perf_counter() < deadline:
                if await episode(conn, call, index=index * 1000 + episodes, steps=steps, deadline=deadline):
                    result.episodes += 1
                else:
                    await asyncio.sleep(0.05)  # 429 or a broken connection: back off, don't spin
                episodes += 1
        finally:
            await conn.close()

    await asyncio.gather(*(client(i) for i in range(clients)))
    return result


def _main() -> None:
    parser = argparse.ArgumentParser(description="smoke the NeMo Gym path against a running gym-server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    result = run(lambda: _smoke(args.port, args.clients, args.duration, args.steps))
    steps = len(result.latencies["step"])
    rate = steps / args.duration
    print(f"{args.clients} clients, {args.duration:g} s: {result.episodes} episodes, {rate:.0f} steps/s")
    for kind, samples in result.latencies.items():
        ordered = sorted(samples)
        p50, p99 = percentile(ordered, 50) * 1e3, percentile(ordered, 99) * 1e3
        print(f"  {kind:6} n={len(ordered):6}  p50 {p50:.2f} ms  p99 {p99:.2f} ms")
    print(f"  errors: {dict(result.errors) or 'none'}")


if __name__ == "__main__":
    _main()
