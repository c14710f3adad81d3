"""The entry point of `serve --ray`: one ASGI app that forwards each request to a replica.

A session lives in one replica's memory, so the router pins it there: the create goes to the least loaded
replica and the session id in its 201 is remembered with that replica; every later request naming the
session (`/v1/sessions/{id}/...`) goes to the same replica. A client never pins anything. Other requests
(environments, rollouts, verification) are stateless and go to the least loaded replica. Each answer names
its replica in `x-gym-replica`; `GET /v1/replicas` lists the replicas, their nodes and loads, the dead.

A session whose replica died answers 410 `session-lost` with a pointer to its stored trajectory (a GET
of it is answered from the store by any replica); a request that cannot reach its replica while the
supervisor has not yet decided whether it is dead answers 503 `replica-unavailable` with Retry-After:
1. Routes whose sessions the router does not see (the OpenEnv WebSocket, MCP and NeMo Gym facades) are
not pinned: see docs/scale.md.

With `direct_sessions` (the default) a create's 201 also names the replica's own URL in
`x-gym-replica-url`; a client that follows it (GymClient does) steps the replica directly, so the hop is
paid once per episode instead of once per step, and falls back to this entry point when the replica stops
answering (which then answers 410 `session-lost`). A client that ignores the header is forwarded as before.

No FastAPI here: a plain ASGI callable, so the hop costs one parse and one forward per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from starlette.types import Message, Receive, Scope, Send

from gym_server.core.errors import GymError, ReplicaUnavailable, SessionLost
from gym_server.core.problems import gym_error_problem
from gym_server.scale.pool import NoReplica, Replica, ReplicaPool
from gym_server.scale.upstream import UpstreamError

log = logging.getLogger(__name__)
_SESSIONS = "/v1/sessions"
_REPLICAS = "/v1/replicas"
_REPLICA_HEADER = b"x-gym-replica"
_REPLICA_URL_HEADER = b"x-gym-replica-url"
_SESSION_PREFIX = _SESSIONS + "/"


class EntryPoint:
    """ASGI app: the single HTTP entry point in front of the pool's replicas."""

    def __init__(self, pool: ReplicaPool) -> None:
        self.pool = pool
        self._supervisor: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            try:
                await self._forward(scope, receive, send)
            except GymError as exc:
                await gym_error_problem(exc, scope["path"])(scope, receive, send)
        else:  # WebSocket: the facades that use it keep sessions the router cannot see
            await receive()
            await send(
                {"type": "websocket.close", "code": 1008, "reason": "not routed by the Ray entry point"}
            )

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.pool.start()
                except Exception as exc:
                    await send(
                        {"type": "lifespan.startup.failed", "message": f"replicas did not start: {exc}"}
                    )
                    return
                self._supervisor = asyncio.create_task(self.pool.run())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._supervisor is not None:
                    self._supervisor.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._supervisor
                await self.pool.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        body = await _read_body(receive)
        if path == _REPLICAS and method == "GET":
            await _send_json(send, self.pool.describe())
            return
        target: bytes = scope.get("raw_path") or path.encode()
        if scope["query_string"]:
            target += b"?" + scope["query_string"]
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        session_id = (
            path[len(_SESSION_PREFIX) :].partition("/")[0] if path.startswith(_SESSION_PREFIX) else ""
        )
        creating = method == "POST" and path == _SESSIONS
        if session_id:
            replica = self._owner(session_id, read_only=method == "GET")
            answer = await self._session_request(replica, session_id, method, target, headers, body)
            if answer.status in (404, 410) or (method == "DELETE" and answer.status < 300):
                self.pool.forget(session_id)
        else:
            replica, answer = await self._any_request(method, target, headers, body)
            if creating and answer.status == 201:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    self.pool.created(orjson.loads(answer.body)["session_id"], replica)
        response_headers = [*answer.headers, (_REPLICA_HEADER, replica.name.encode())]
        if creating and answer.status == 201 and self.pool.settings.direct_sessions:
            response_headers.append((_REPLICA_URL_HEADER, replica.url.encode()))
        if answer.status not in (204, 304):
            response_headers = [*response_headers, (b"content-length", str(len(answer.body)).encode())]
        await send({"type": "http.response.start", "status": answer.status, "headers": response_headers})
        await send({"type": "http.response.body", "body": bytes(answer.body)})

    def _owner(self, session_id: str, *, read_only: bool) -> Replica:
        name = self.pool.owner(session_id)
        if name is not None and name in self.pool.dead:
            if read_only:  # any replica reads it back from the store, as `lost`
                return self._pick()
            raise SessionLost(session_id, name)
        replica = self.pool.replicas.get(name) if name is not None else None
        if replica is not None:
            return replica
        # Never created through this entry point (or long closed): any replica answers from the store.
        return self._pick()

    async def _session_request(
        self, replica: Replica, session_id: str, method: str, target: bytes, headers: Any, body: bytes
    ) -> Any:
        try:
            return await replica.upstream.request(method, target, headers, body)
        except UpstreamError as exc:
            log.warning("replica %s unreachable for session %s: %s", replica.name, session_id, exc)
            if not await self.pool.check(replica) and self.pool.owner(session_id) == replica.name:
                raise SessionLost(session_id, replica.name) from exc
            raise ReplicaUnavailable(
                f"replica {replica.name} holding session {session_id!r} does not answer; retry shortly"
            ) from exc

    async def _any_request(
        self, method: str, target: bytes, headers: Any, body: bytes
    ) -> tuple[Replica, Any]:
        """Forward to the least loaded replica; if it cannot be reached (the request never arrived),
        check it and try the next one once."""
        replica = self._pick()
        try:
            return replica, await replica.upstream.request(method, target, headers, body)
        except UpstreamError as exc:
            log.warning("replica %s unreachable: %s", replica.name, exc)
            await self.pool.check(replica)
        replica = self._pick()
        try:
            return replica, await replica.upstream.request(method, target, headers, body)
        except UpstreamError as exc:
            raise ReplicaUnavailable(f"no replica answered: {exc}") from exc

    def _pick(self) -> Replica:
        try:
            return self.pool.pick()
        except NoReplica as exc:
            raise ReplicaUnavailable(str(exc)) from exc


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message: Message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_json(send: Send, content: object) -> None:
    body = orjson.dumps(content)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
