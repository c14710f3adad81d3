"""The client side of OpenEnv's WebSocket session: the gym driving an OpenEnv environment server.

An OpenEnv environment runs as OpenEnv's own server process (its `create_app`, from its own venv, with
its own dependencies); the gym reaches it over loopback the way openenv-core's `EnvClient` does: one
WebSocket to `{base_url}/ws` per episode, `reset` / `step` / `close` frames, one answer each. Nothing of
openenv-core is imported: the wire is spoken with `websockets`, which `uvicorn[standard]` already
installs for the server side.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from gym_server.core.errors import AtCapacity, BackendUnavailable

__all__ = ["OpenEnvAnswer", "OpenEnvConnection", "OpenEnvError", "ws_url"]


def ws_url(base_url: str) -> str:
    """OpenEnv's `/ws` URL of a server's base URL (http -> ws, https -> wss), as its client builds it."""
    url = base_url.rstrip("/")
    for plain, secure in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(plain):
            url = secure + url[len(plain) :]
    return f"{url}/ws"


class OpenEnvError(Exception):
    """The OpenEnv server answered with its error message (`{"type": "error", "data": {...}}`)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.message = str(data.get("message", "unknown error"))
        self.code = str(data.get("code", "UNKNOWN"))
        super().__init__(f"{self.message} (code: {self.code})")


@dataclass(frozen=True, slots=True)
class OpenEnvAnswer:
    """A reset or step answer: OpenEnv's `{"observation", "reward", "done"}`."""

    observation: dict[str, Any]
    reward: float | None
    done: bool


class OpenEnvConnection:
    """One OpenEnv session (a WebSocket) on a server; every call is bounded by `timeout_s`."""

    def __init__(self, base_url: str, timeout_s: float, max_message_bytes: int) -> None:
        self.url, self.timeout_s, self.max_message_bytes = ws_url(base_url), timeout_s, max_message_bytes
        self._ws: ClientConnection | None = None

    def __repr__(self) -> str:
        return f"OpenEnvConnection({self.url!r}, open={self._ws is not None})"

    async def open(self) -> None:
        """Connect.

        Raises:
            BackendUnavailable: the server does not answer or refuses the WebSocket (503).
        """
        try:
            self._ws = await connect(
                self.url, open_timeout=self.timeout_s, max_size=self.max_message_bytes, compression=None
            )
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise BackendUnavailable(f"the OpenEnv server at {self.url} is unreachable: {exc}") from None

    async def reset(self, **kwargs: Any) -> OpenEnvAnswer:
        """Start an episode (OpenEnv's reset kwargs: `seed`, `episode_id`, the environment's own).

        Raises:
            AtCapacity: the server holds its maximum of sessions (its CAPACITY_REACHED), 429.
            BackendUnavailable: the server failed or went away (503).
        """
        try:
            return await self._ask({"type": "reset", "data": kwargs})
        except OpenEnvError as exc:
            if exc.code == "CAPACITY_REACHED":
                raise AtCapacity(1, 1, what=f"sessions of the OpenEnv server at {self.url}") from None
            raise BackendUnavailable(f"the OpenEnv server at {self.url} refused the reset: {exc}") from None

    async def step(self, action: dict[str, Any]) -> OpenEnvAnswer:
        """One action.

        Raises:
            OpenEnvError: the server refused the action (a malformed one: its VALIDATION_ERROR, ...).
            BackendUnavailable: the connection failed or timed out.
        """
        return await self._ask({"type": "step", "data": action})

    async def _ask(self, message: dict[str, Any]) -> OpenEnvAnswer:
        if self._ws is None:
            await self.open()
        assert self._ws is not None
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._ws.send(orjson.dumps(message).decode())
                raw = await self._ws.recv()
        except (OSError, TimeoutError, WebSocketException) as exc:
            await self.close()
            raise BackendUnavailable(
                f"the OpenEnv server at {self.url} failed: {type(exc).__name__}"
            ) from None
        answer = orjson.loads(raw)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, dict):
            raise BackendUnavailable(f"the OpenEnv server at {self.url} sent a message that is not OpenEnv's")
        if answer.get("type") == "error":
            raise OpenEnvError(data)
        reward = data.get("reward")
        return OpenEnvAnswer(
            observation=dict(data.get("observation") or {}),
            reward=float(reward) if isinstance(reward, int | float) else None,
            done=bool(data.get("done", False)),
        )

    async def close(self) -> None:
        """End the session (OpenEnv's `close` message, then the WebSocket's close); never raises."""
        ws, self._ws = self._ws, None
        if ws is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.timeout_s):
                await ws.send('{"type":"close"}')
                await ws.close()
