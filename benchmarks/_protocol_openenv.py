"""The OpenEnv paths of `protocols.py`: the gym's OpenEnv facade (`/v1/environments/counter/openenv`)
spoken as openenv-core 0.3.0's clients speak it, with the load generator's own lean clients (the real
openenv-core client is proven in tests/interop/openenv; here the client must cost less than the server).

- WebSocket: one connection per client for the whole run, as an `EnvClient` holds one; each episode is
  `{"type": "reset"}` then K `{"type": "step"}` frames; the next reset closes the finished episode.
- HTTP: `POST .../reset`, then K `POST .../step` naming the episode; the final step closes it.
- OpenEnv's own server: the WebSocket client against openenv-core's `create_app` serving the same counter
  episode (`peers/openenv_counter.py`), run from the openenv peer's venv (`make interop PEER=openenv`
  builds it; `GYM_BENCH_OPENENV_PYTHON` names another interpreter).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import orjson
from _loadgen import HttpConnection
from _protocol_path import PeerServer, ProtocolPath, UnexpectedAnswer, task_id
from websockets.asyncio.client import ClientConnection, connect

__all__ = ["PATHS", "OpenEnvHttpClient", "OpenEnvWsClient"]

PREFIX = "/v1/environments/counter/openenv"
_ADD: dict[str, Any] = {"type": "call_tool", "tool_name": "add", "arguments": {"amount": 1}}
_SUBMIT: dict[str, Any] = {"type": "call_tool", "tool_name": "submit", "arguments": {}}


class OpenEnvWsClient:
    """OpenEnv's WebSocket session (`/ws`), one text frame per request, as `EnvClient` sends them."""

    _ADD_FRAME = orjson.dumps({"type": "step", "data": _ADD}).decode()
    _SUBMIT_FRAME = orjson.dumps({"type": "step", "data": _SUBMIT}).decode()

    def __init__(self, host: str, port: int, prefix: str = PREFIX) -> None:
        self.url = f"ws://{host}:{port}{prefix}/ws"
        self.ws: ClientConnection | None = None

    async def connect(self) -> None:
        self.ws = await connect(self.url, open_timeout=30, max_size=None, compression=None)

    async def _ask(self, frame: str) -> str | bytes:
        assert self.ws is not None
        await self.ws.send(frame)
        answer = await self.ws.recv()
        observed = (
            answer.startswith('{"type":"observation"')
            if isinstance(answer, str)
            else answer.startswith(b'{"type":"observation"')
        )
        if not observed:
            raise UnexpectedAnswer(str(answer[:120]))
        return answer

    async def begin(self, index: int) -> None:
        data = {"task_id": task_id(index), "seed": index}
        await self._ask(orjson.dumps({"type": "reset", "data": data}).decode())

    async def step(self, last: bool) -> None:
        await self._ask(self._SUBMIT_FRAME if last else self._ADD_FRAME)

    async def end(self) -> None:
        """Nothing to send: the next reset (or the close at the end) closes the finished episode."""

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.send('{"type":"close"}')
            await self.ws.close()
            self.ws = None


class OpenEnvHttpClient:
    """OpenEnv's HTTP `/reset` and `/step` (with `episode_id`) over one keep-alive connection."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = HttpConnection(host, port, timeout_s=30.0)
        self._add = self._submit = b""

    async def connect(self) -> None:
        await self.conn.connect()

    async def begin(self, index: int) -> None:
        body = orjson.dumps({"task_id": task_id(index), "seed": index})
        opened = await self.conn.send(self.conn.render("POST", f"{PREFIX}/reset", body))
        if opened.status != 200:
            raise UnexpectedAnswer(f"reset: {opened.status}")
        episode = opened.json()["observation"]["metadata"]["gym-server/episode"]["session_id"]
        self._add = self.conn.render(
            "POST", f"{PREFIX}/step", orjson.dumps({"action": _ADD, "episode_id": episode})
        )
        self._submit = self.conn.render(
            "POST", f"{PREFIX}/step", orjson.dumps({"action": _SUBMIT, "episode_id": episode})
        )

    async def step(self, last: bool) -> None:
        answer = await self.conn.send(self._submit if last else self._add)
        if answer.status != 200:
            raise UnexpectedAnswer(f"step: {answer.status}")

    async def end(self) -> None:
        """Nothing to send: the final step closed the episode."""

    async def close(self) -> None:
        await self.conn.close()


def _openenv_server() -> PeerServer:
    here = Path(__file__).resolve().parent
    python = Path(
        os.environ.get("GYM_BENCH_OPENENV_PYTHON")
        or here.parent / "var" / "interop" / "openenv" / "bin" / "python"
    )

    def argv(port: int) -> list[str]:
        uvicorn = [str(python), "-m", "uvicorn", "--app-dir", str(here / "peers"), "openenv_counter:app"]
        return [
            *uvicorn,
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--log-level",
            "warning",
        ]

    missing = None if python.exists() else f"{python} not found: `make interop PEER=openenv` builds it"
    return PeerServer(argv, "/health", missing)


PATHS = [
    ProtocolPath("OpenEnv WebSocket facade", "reset, K step frames on one connection", OpenEnvWsClient),
    ProtocolPath("OpenEnv HTTP facade", "POST reset, K POST step (episode_id)", OpenEnvHttpClient),
    ProtocolPath(
        "OpenEnv's own server (WS)",
        "openenv-core 0.3.0 create_app, same frames; keeps nothing",
        functools.partial(OpenEnvWsClient, prefix=""),
        _openenv_server(),
    ),
]
