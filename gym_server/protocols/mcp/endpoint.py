"""The ASGI endpoint `/v1/environments/{env}/mcp`: gym sessions opened and closed around the SDK's
streamable-HTTP session manager.

The SDK owns the MCP wire (JSON-RPC, session ids, the initialize handshake); this layer owns what makes
an MCP session a gym episode, because only it sees the HTTP request before the SDK does:
- an opening `initialize` (a POST without `Mcp-Session-Id`) first creates the gym session through the
  `SessionManager` (task by `task_id`, or drawn by `seed` from `split`, from the query string), so a
  refusal (429 at capacity, 404 unknown env or task, 422 bad query) is answered before any MCP state
  exists, as a JSON-RPC error at the native API's HTTP status, which the `mcp` client raises as
  `MCPError`; the SDK's session id in its answer is then bound to the gym session;
- a DELETE closes and stores the gym session before the SDK ends the MCP session, so its 2xx means
  committed, as the native DELETE's does;
- every request carries its gym session id to the handlers in the scope's `state`.
A client that vanishes without a DELETE leaves its episode to the gym's idle TTL, like a native client.
Requests of the stateless 2026-07-28 protocol era (no session to hold an episode) are refused with a
JSON-RPC error, on which the `mcp` client's `auto` mode falls back to the initialize handshake.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl

import orjson
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import InitializeRequestParams
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope, Send

from gym_server.core.asgi import read_body, replay_body, send_json
from gym_server.core.errors import GymError, InvalidRequest, NotFoundError
from gym_server.core.settings import Settings
from gym_server.protocols.mcp import mapping
from gym_server.protocols.mcp.server import SCOPE_KEY, Binding, Episodes, build_server

__all__ = ["McpEndpoint", "McpFacade", "refuse_version", "send_error", "send_gym_error"]

log = logging.getLogger(__name__)

_SESSION_HEADER = b"mcp-session-id"
_VERSION_HEADER = b"mcp-protocol-version"


class McpFacade:
    """What the MCP endpoint needs while the app runs: the episodes table and the SDK's manager.

    Built in the app's lifespan (`serving`), since the SDK's manager runs a task group for as long as
    its MCP sessions live.
    """

    def __init__(self, episodes: Episodes, settings: Settings) -> None:
        self.episodes = episodes
        sessions = settings.sessions
        self.sdk = StreamableHTTPSessionManager(
            build_server(episodes),
            # One JSON body per POST: the gym never sends server-initiated requests mid-call.
            json_response=True,
            # An MCP session idles out on the gym's TTL (its episode was reaped by then).
            session_idle_timeout=sessions.default_ttl_s,
            max_request_body_size=settings.limits.max_body_bytes,
            # Each MCP session holds a gym session, so the gym's capacity is the real limit; an MCP
            # session may outlive its reaped episode by up to one TTL, hence the headroom.
            max_sessions=2 * sessions.max_sessions,
        )

    def __repr__(self) -> str:
        return f"McpFacade({self.episodes!r})"


class McpEndpoint:
    """The ASGI app of the route; finds the running `McpFacade` on `app.state.mcp`."""

    def __repr__(self) -> str:
        return "McpEndpoint()"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        facade: McpFacade | None = getattr(scope["app"].state, "mcp", None)
        if facade is None:  # the app's lifespan has not started (or has ended)
            await send_error(send, 503, mapping.INTERNAL_ERROR, "the MCP facade is not running", None)
            return
        if await refuse_version(scope, send):
            return
        headers = dict(scope["headers"])
        env: str = scope["path_params"]["env"]
        mcp_id = headers.get(_SESSION_HEADER)
        if mcp_id is not None:
            await _in_session(facade, env, mcp_id.decode("latin-1"), scope, receive, send)
        elif scope["method"] == "POST":
            await _opening(facade, env, scope, receive, send)
        else:
            await facade.sdk.handle_request(scope, receive, send)


async def _in_session(
    facade: McpFacade, env: str, mcp_id: str, scope: Scope, receive: Receive, send: Send
) -> None:
    """A request of an open MCP session: tag it with its gym session; a DELETE stores the episode first."""
    binding = facade.episodes.get(mcp_id)
    if binding is not None:
        # The SDK runs the session's handlers in the task of the request that opened it, so a request
        # of another tenant must be stopped here, answered as an MCP session id never issued.
        if not facade.episodes.manager.owned(binding.session_id):
            await send_error(send, 404, mapping.INVALID_REQUEST, "unknown MCP session", None)
            return
        if binding.env != env:
            await send_error(
                send,
                404,
                mapping.INVALID_REQUEST,
                f"this MCP session is an episode of {binding.env!r}, not of {env!r}",
                None,
            )
            return
        scope.setdefault("state", {})[SCOPE_KEY] = binding.session_id
        if scope["method"] == "DELETE":
            try:
                await facade.episodes.manager.close(binding.session_id)
            except NotFoundError:
                pass  # closed long ago, its id forgotten: its trajectory is stored
            except GymError as exc:  # not committed (the store is down): the client may repeat the DELETE
                await send_gym_error(send, exc, None)
                return
            facade.episodes.unbind(mcp_id)
    await facade.sdk.handle_request(scope, receive, send)


async def _opening(facade: McpFacade, env: str, scope: Scope, receive: Receive, send: Send) -> None:
    """A POST without a session id: a well-formed `initialize` opens a gym session, then the SDK answers.

    Whatever the SDK answers that is not an initialize *result* (a JSON-RPC error at 200, as it answers
    bad params, or any refusal) leaves nothing open: the gym session is closed, the SDK's MCP session is
    ended, and the answer goes out without an `mcp-session-id` that would name a dead session.
    """
    try:
        raw = await read_body(receive)
    except ClientDisconnect:
        return
    receive = replay_body(raw, receive)
    request_id, initialize = _peek(raw)
    session_id: str | None = None
    if initialize:  # anything else the SDK refuses in its own words; no episode is opened for it
        facade.episodes.sweep()
        try:
            params = mapping.parse_episode_params(_query_pairs(scope))
            session = await facade.episodes.manager.create(
                env, task_id=params.task_id, seed=params.seed, split=params.split, run=params.run
            )
        except GymError as exc:
            await send_gym_error(send, exc, request_id)
            return
        session_id = session.id
        scope.setdefault("state", {})[SCOPE_KEY] = session_id
    answer = _Answer()
    issued: str | None = None
    bound = False
    try:
        await facade.sdk.handle_request(scope, receive, answer.collect)
        issued = answer.session_header()
        if session_id is not None and issued is not None and answer.is_result():
            # Bound before the answer leaves, so the client's next request finds its episode.
            facade.episodes.bind(issued, Binding(session_id, env))
            bound = True
        if not bound:
            answer.drop_session_header()
        await answer.flush(send)
    finally:
        if not bound:
            await _abandon_opening(facade, scope, issued, session_id)


class _Answer:
    """The SDK's whole answer to an opening request, held until it is known to have opened a session.

    With `json_response=True` the SDK answers a POST with one JSON body, so holding it costs one copy.
    """

    def __init__(self) -> None:
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    def __repr__(self) -> str:
        return f"_Answer(status={self.start and self.start['status']})"

    async def collect(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
        elif message["type"] == "http.response.body":
            self.chunks.append(bytes(message.get("body", b"")))

    def session_header(self) -> str | None:
        if self.start is None:
            return None
        for name, value in self.start.get("headers", []):
            if name.lower() == _SESSION_HEADER:
                return str(value.decode("latin-1"))
        return None

    def is_result(self) -> bool:
        """Whether the answer is a JSON-RPC result (an initialize's), not an error or a refusal."""
        if self.start is None or self.start["status"] >= 400:
            return False
        try:
            body: Any = orjson.loads(b"".join(self.chunks))
        except orjson.JSONDecodeError:
            return False
        return isinstance(body, dict) and isinstance(body.get("result"), dict)

    def drop_session_header(self) -> None:
        if self.start is not None:
            headers = [(n, v) for n, v in self.start.get("headers", []) if n.lower() != _SESSION_HEADER]
            self.start = {**self.start, "headers": headers}

    async def flush(self, send: Send) -> None:
        if self.start is None:  # the SDK sent nothing (it raised): the ASGI server answers 500
            return
        await send(self.start)
        await send({"type": "http.response.body", "body": b"".join(self.chunks)})


async def _abandon_opening(
    facade: McpFacade, scope: Scope, mcp_id: str | None, session_id: str | None
) -> None:
    """Undo a failed opening: end the SDK's MCP session (a DELETE of its own, the SDK's one public way
    to end a session that answered 2xx), and close the gym session (stored `abandoned`)."""
    if mcp_id is not None:
        # The opening's own headers (Host and Origin pass the SDK's checks as they did), naming the session.
        headers = [(n, v) for n, v in scope["headers"] if n not in (b"content-length", b"content-type")]
        headers.append((_SESSION_HEADER, mcp_id.encode("latin-1")))
        delete: Scope = {**scope, "method": "DELETE", "headers": headers, "state": {}}

        async def nothing_more() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message: Message) -> None:
            return None

        try:
            await facade.sdk.handle_request(delete, nothing_more, discard)
        except Exception:  # the SDK forgets a session it refused on its own; this is belt and braces
            log.exception("ending the MCP session of a failed opening failed")
    if session_id is not None:
        try:
            await facade.episodes.manager.close(session_id)
        except GymError as exc:
            log.warning("MCP opening failed; closing its gym session failed: %s", exc.detail)


def _peek(raw: bytes) -> tuple[str | int | None, bool]:
    """The JSON-RPC id of a request body and whether it is an `initialize` request the SDK will take
    (an id and valid params): only those open a gym session."""
    try:
        body: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, False
    if not isinstance(body, dict):
        return None, False
    request_id = body.get("id")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return None, False
    if body.get("method") != "initialize":
        return request_id, False
    try:
        InitializeRequestParams.model_validate(body.get("params"))
    except ValidationError:
        return request_id, False
    return request_id, True


def _query_pairs(scope: Scope) -> list[tuple[str, str]]:
    try:
        return parse_qsl(scope["query_string"].decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise InvalidRequest("the MCP endpoint's query string is not UTF-8") from None


async def refuse_version(scope: Scope, send: Send) -> bool:
    """Answer a request of a protocol era without an initialize handshake (no session to hold an
    episode) with a JSON-RPC error, on which the `mcp` client's `auto` mode falls back to the
    handshake; returns whether it did."""
    version = dict(scope["headers"]).get(_VERSION_HEADER)
    if version is None or version.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS:
        return False
    await send_error(
        send,
        400,
        mapping.INVALID_REQUEST,
        "each MCP session here is one gym episode, so this endpoint speaks the protocol versions "
        f"with an initialize handshake ({', '.join(HANDSHAKE_PROTOCOL_VERSIONS)}); "
        f"{version.decode('latin-1')[:40]!r} has no session",
        None,
    )
    return True


async def send_gym_error(send: Send, exc: GymError, request_id: str | int | None) -> None:
    headers = [(name.lower().encode(), value.encode()) for name, value in exc.headers.items()]
    await send_json(send, exc.status, mapping.jsonrpc_error_body(exc, request_id), headers)


async def send_error(send: Send, status: int, code: int, message: str, request_id: str | int | None) -> None:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    await send_json(send, status, orjson.dumps(body), [])
