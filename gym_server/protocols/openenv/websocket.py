"""OpenEnv's WebSocket session (`/ws`, what openenv-core's `EnvClient`s speak) on the gym's sessions.

The wire is OpenEnv's: the client sends `{"type": "reset" | "step" | "state" | "close", "data": ...}`
text frames and reads one `{"type": "observation" | "state" | "error", "data": ...}` answer to each.
A connection holds at most one gym episode at a time: a reset opens one (a second reset first closes
the one before, as OpenEnv's reset starts a new episode), and a `close` message or the connection's
end closes it, committed to the store, so a client that vanishes leaves a stored trajectory. Nothing
a client sends ends the connection with an error: a frame that does not parse, an unknown message type
or a malformed action is answered with OpenEnv's error message and the episode goes on.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from gym_server.core import jsontext
from gym_server.core.errors import GymError
from gym_server.protocols.openenv import mapping
from gym_server.protocols.openenv.episodes import act, open_episode
from gym_server.sessions.manager import SessionManager

__all__ = ["Connection", "openenv_websocket"]

log = logging.getLogger(__name__)

_NO_EPISODE = "no episode is open on this connection: send a reset first"


class Connection:
    """The OpenEnv session of one WebSocket: its gym episode, and the answer to each frame."""

    def __init__(self, manager: SessionManager, env: str, max_frame_bytes: int) -> None:
        self.manager, self.env, self.max_frame_bytes = manager, env, max_frame_bytes
        self.session_id: str | None = None

    def __repr__(self) -> str:
        return f"Connection(env={self.env!r}, session_id={self.session_id!r})"

    async def handle(self, raw: str | bytes) -> dict[str, Any] | None:
        """The answer to one frame, or None for a `close` (the caller then ends the connection)."""
        if len(raw) > self.max_frame_bytes:
            return _error(
                f"message of {len(raw)} bytes is over this server's limit of {self.max_frame_bytes}",
                mapping.VALIDATION_ERROR,
            )
        try:
            data = raw.encode() if isinstance(raw, str) else raw
            message = jsontext.loads_strict(data)
        except ValueError as exc:  # not JSON, not UTF-8, or a value the gym cannot store
            return _error(f"Invalid JSON: {exc}", mapping.INVALID_JSON)
        if not isinstance(message, dict):
            return _error("a message is a JSON object with a 'type'", mapping.VALIDATION_ERROR)
        kind = message.get("type")
        try:
            if kind == "reset":
                return await self._reset(message.get("data"))
            if kind == "step":
                if "data" not in message:
                    return _error("a step message carries its action in 'data'", mapping.VALIDATION_ERROR)
                action = mapping.parse_action(message["data"])
                if self.session_id is None and isinstance(action, mapping.ListTools):
                    # OpenEnv lists tools without an episode (its MCPToolClient does so first thing).
                    entry = self.manager.registry.get(self.env)
                    return {"type": "observation", "data": mapping.catalog_tools_result(entry)}
                return {"type": "observation", "data": await act(self.manager, self._live(), action)}
            if kind == "state":
                if self.session_id is None:  # as OpenEnv's own server: a fresh environment's state
                    entry = self.manager.registry.get(self.env)
                    return {"type": "state", "data": mapping.fresh_state(entry)}
                return {"type": "state", "data": mapping.state(self.manager.get(self.session_id))}
            if kind == "close":
                return None
        except mapping.ActionError as exc:
            return _error(exc.message, exc.code, **({"errors": exc.errors} if exc.errors else {}))
        except GymError as exc:
            return {"type": "error", "data": mapping.gym_error_data(exc, opening=kind == "reset")}
        return _error(f"Unknown message type: {str(kind)[:40]}", mapping.UNKNOWN_TYPE)

    def _live(self) -> str:
        if self.session_id is None:
            raise mapping.ActionError(_NO_EPISODE, mapping.SESSION_ERROR)
        return self.session_id

    async def _reset(self, data: Any) -> dict[str, Any]:
        params = mapping.parse_reset(data)
        await self.end()  # a new episode: the one before is closed and stored first
        session = await open_episode(self.manager, self.env, params, "ws")
        self.session_id = session.id
        return {"type": "observation", "data": mapping.reset_result(session, "ws")}

    async def end(self) -> None:
        """Close the connection's episode, if any, committed to the store (idempotent).

        Raises:
            GymError: the store did not commit in time (the record stays queued and is written later).
        """
        session_id, self.session_id = self.session_id, None
        if session_id is None:
            return
        try:
            await self.manager.close(session_id)
        except GymError as exc:
            if exc.status not in (404, 410):  # already gone (closed or reaped): stored before
                raise


def _error(message: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "data": mapping.error_data(message, code, **extra)}


async def openenv_websocket(websocket: WebSocket) -> None:
    """The route's endpoint: one OpenEnv session per connection, answered frame by frame."""
    manager: SessionManager | None = getattr(websocket.app.state, "manager", None)
    await websocket.accept()
    if manager is None:  # the app's lifespan has not started (or has ended)
        await websocket.send_text(_dumps(_error("the server is not running", mapping.SESSION_ERROR)))
        await websocket.close(code=1011)
        return
    settings = websocket.app.state.settings
    connection = Connection(manager, websocket.path_params["env"], settings.limits.max_body_bytes)
    try:
        while True:
            frame = await websocket.receive()
            if frame["type"] == "websocket.disconnect":
                break
            raw = frame.get("text")
            answer = await connection.handle(raw if raw is not None else frame.get("bytes") or b"")
            if answer is None:
                break
            await websocket.send_text(_dumps(answer))
    except WebSocketDisconnect:
        pass  # the client left while its answer was being sent: its episode is closed below
    finally:
        try:
            await connection.end()
        except GymError as exc:
            log.warning("OpenEnv connection ended; its episode's close is not committed: %s", exc.detail)
        if websocket.application_state == WebSocketState.CONNECTED:
            # The client may be gone already (it sent `close` and hung up, or dropped the connection).
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await websocket.close()


def _dumps(answer: dict[str, Any]) -> str:
    return jsontext.dumps(answer, default=str).decode()
