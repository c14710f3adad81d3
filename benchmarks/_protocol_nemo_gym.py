"""The NeMo Gym path of `protocols.py`: the gym's NeMo Gym facade (`/v1/environments/counter/nemo-gym`)
spoken as nemo-gym 0.4.0's simple agent speaks to a resources server, with the load generator's own lean
client (NeMo Gym's real `SimpleAgent` and `ServerClient` are proven in tests/interop/nemo-gym; here the
client must cost less than the server).

An episode: `POST .../seed_session` (its answer sets the episode's cookie), K `POST .../add` (the last
one `POST .../submit`) each sent with the cookie of the previous answer, then `POST .../verify`, which
scores, closes and stores the episode, as the native path's DELETE does.

Run alone, it is a smoke test against a server already listening:
`python benchmarks/_protocol_nemo_gym.py --port P --clients 2 --duration 2` prints steps/s and the step
p50 and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter

from _loadgen import HttpConnection, error_kind, percentile, run
from _protocol_path import ProtocolPath, UnexpectedAnswer, task_id

__all__ = ["PATHS", "NemoGymClient"]

PREFIX = "/v1/environments/counter/nemo-gym"
COOKIE = b"gym_server_nemo_gym="
# What NeMo Gym's agent sends to /verify: the run request and the model's response (no final answer).
_VERIFY = b'{"responses_create_params":{"input":[]},"response":{"output":[]}}'


def _with_cookie(data: bytes, cookie: bytes) -> bytes:
    """A rendered request with a `Cookie` header after its request line."""
    line_end = data.index(b"\r\n") + 2
    return data[:line_end] + b"Cookie: " + cookie + b"\r\n" + data[line_end:]


class NemoGymClient:
    """A NeMo Gym resources server's routes over one keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = HttpConnection(host, port, timeout_s=30.0)
        self.cookie = b""

    async def connect(self) -> None:
        await self.conn.connect()

    async def _post(self, route: str, body: bytes, what: str) -> None:
        data = self.conn.render("POST", f"{PREFIX}/{route}", body)
        answer = await self.conn.send(_with_cookie(data, self.cookie) if self.cookie else data)
        if answer.status != 200:
            raise UnexpectedAnswer(f"{what}: {answer.status}")
        # The agent sends each call with the cookie of the last answer (verify's sets none).
        self.cookie = answer.headers.get("set-cookie", "").encode("latin-1").partition(b";")[0]

    async def begin(self, index: int) -> None:
        self.cookie = b""
        await self._post("seed_session", f'{{"task_id":"{task_id(index)}","seed":{index}}}'.encode(), "seed")
        if not self.cookie.startswith(COOKIE):
            raise UnexpectedAnswer("seed: no session cookie")

    async def step(self, last: bool) -> None:
        await self._post("submit" if last else "add", b"{}" if last else b'{"amount":1}', "step")

    async def end(self) -> None:
        await self._post("verify", _VERIFY, "verify")

    async def close(self) -> None:
        await self.conn.close()


PATHS = [
    ProtocolPath(
        "NeMo Gym resources server",
        "seed_session, K POST /<tool> carrying its cookie, verify over HTTP/1.1",
        NemoGymClient,
    )
]


async def _smoke(port: int, clients: int, duration: float, steps: int) -> None:
    deadline = time.perf_counter() + duration
    latencies: list[float] = []
    errors: Counter[str] = Counter()

    async def play(index: int) -> None:
        client = NemoGymClient("127.0.0.1", port)
        await client.connect()
        episode = 0
        while time.perf_counter() < deadline:
            episode += 1
            try:
                await client.begin(index * 1000 + episode)
                for k in range(steps):
                    began = time.perf_counter()
                    await client.step(last=k == steps - 1)
                    latencies.append(time.perf_counter() - began)
                await client.end()
            except Exception as exc:
                errors[error_kind(exc)] += 1
                await asyncio.sleep(0.05)
        await client.close()

    await asyncio.gather(*(play(i) for i in range(clients)))
    ordered = sorted(latencies)
    p50, p99 = percentile(ordered, 50) * 1e3, percentile(ordered, 99) * 1e3
    print(
        f"{clients} clients: {len(ordered) / duration:.0f} steps/s, step p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )
    print(f"errors: {dict(errors) or 'none'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="smoke the NeMo Gym path against a running gym-server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=8)
    cli = parser.parse_args()
    run(lambda: _smoke(cli.port, cli.clients, cli.duration, cli.steps))
