"""The gym's HTTP/1.1 connection: httptools parsing, keep-alive, pipelining, flow control, the deadlines
slow clients need, and the hand-off of a WebSocket upgrade to uvicorn's WebSocket protocol.

uvicorn still runs the server (sockets, signals, lifespan, graceful shutdown, the `Date` header); this
protocol replaces its `HttpToolsProtocol`, which costs about 13 % more server CPU per request
(`benchmarks/http_floor.py`; docs/benchmarks.md, "Round 7"): two writes per response, a timer armed and
cancelled per request, an `asyncio.Event`, a regex pair per header. Here a response of known length is
one write (`http_exchange`), and one timer per connection carries every deadline:

- the head deadline, `header_timeout_s`: from the connection's opening, or a later request's first byte,
  to the end of that request's head;
- the body deadline, `body_timeout_s`: from the end of a head to the end of its body. At the deadline
  the connection is closed; the app's pending `receive()` gets `http.disconnect`;
- the keep-alive deadline, `keep_alive_s`: from a response's end to the next request's first byte (bytes
  that begin no request, CRLFs, do not move it).

Each is measured from the moment its phase began; the timer, armed once, finds the current phase's
deadline when it fires and either closes the connection or sleeps until that deadline, so a request
costs no timer at all. While the app works on a request nothing here limits it (a run with `wait: true`
may take minutes): only the client's side of the exchange is on a clock. A connection beyond
`max_connections` is answered 503 problem+json with `Retry-After` and `Connection: close`, without
reaching the app. A request httptools cannot parse is answered 400 problem+json and the connection
closed. An upgrade to WebSocket (the OpenEnv facade's `/ws`) leaves this protocol for uvicorn's, whose
pings and close handshake bound it; no deadline here applies to it afterwards.

What uvicorn's protocol offers and the gym does not use is left out: access logs, `limit_concurrency`,
`reset_contextvars`, TLS (the gym serves plain HTTP behind whatever terminates TLS).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections import deque
from typing import Any, ClassVar, Literal, cast

import httptools
import orjson
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.server import ServerState

from gym_server.api.http_exchange import Exchange, log
from gym_server.core.errors import TooManyConnections
from gym_server.core.problems import PROBLEM_MEDIA_TYPE, gym_error_problem, problem_body
from gym_server.core.settings import HttpSettings

__all__ = ["GymHttpProtocol", "http_protocol"]

_RETRY_AFTER_S = 1
# A timer that fires this early still counts as on time (the loop's clock has millisecond steps).
_TIMER_SLACK_S = 0.001

_Phase = Literal["head", "body", "app", "idle"]
_ASGI_VERSION = {"version": "3.0", "spec_version": "2.3"}


def http_protocol(limits: HttpSettings) -> type[GymHttpProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, bound to `limits` (one instance per connection)."""
    return type("GymHttpProtocol", (GymHttpProtocol,), {"limits": limits})


class GymHttpProtocol(asyncio.Protocol):
    """One client connection; see the module docstring. uvicorn builds one per accepted socket."""

    limits: ClassVar[HttpSettings]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.app: ASGIApp = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        self.app_state = app_state
        self.root_path = config.root_path
        self.parser = httptools.HttpRequestParser(self)
        # Answer the first of pipelined requests sent after `Connection: close` instead of failing them all.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport | None = None
        self.server_address: tuple[str, int] | None = None
        self.client_address: tuple[str, int] | None = None
        self.write_paused = False
        self.read_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._upgraded = False
        # The request being parsed: its URL and headers until its head is complete, then its exchange.
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect_continue = False
        self._parsing = False  # between a request's first byte and its end
        self._head_done = False  # the request being parsed has its whole head
        self._begun = 0  # requests begun on this connection
        # The request the head or body clock times; the first one's runs from the connection's opening.
        self._clocked = 1
        self._current: Exchange | None = None  # the newest request's exchange (it receives body bytes)
        self._active: Exchange | None = None  # the exchange the app answers now (or answered last)
        self._pipeline: deque[Exchange] = deque()  # whole requests waiting for the active one to end
        # Deadlines: the phase the connection is in, since when, and the one timer.
        self._phase: _Phase = "head"
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport is not a subclass
        connections = self.server_state.connections
        connections.add(self)  # type: ignore[arg-type]  # uvicorn types the set with its own protocols
        if len(connections) > self.limits.max_connections:
            self.app = _too_many_connections(self.limits.max_connections)
        self.server_address = _address(transport.get_extra_info("sockname"))
        self.client_address = _address(transport.get_extra_info("peername"))
        self._enter("head")

    def connection_lost(self, exc: Exception | None) -> None:
        self.server_state.connections.discard(self)
        self._cancel_timer()
        for exchange in (self._active, *self._pipeline, self._current):
            if exchange is not None:
                exchange.disconnect()
        self._pipeline.clear()
        self.resume_writing()
        self.parser = None  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._upgrade_requested() == b"websocket":
                self._hand_over_to_websocket()
                return
            log.warning("Unsupported upgrade request.")
        except httptools.HttpParserError as exc:
            self._refuse_unparsable(str(exc))
            return
        # The phase is read once per read, not per parser callback: a whole request in one read is the
        # usual case, and then nothing here looks at the clock.
        if self._parsing:
            phase: _Phase = "body" if self._head_done else "head"
            if phase != self._phase or self._begun != self._clocked:  # a new request: a clock of its own
                self._clocked = self._begun
                self._enter(phase)
        else:
            self._settle_phase()

    def eof_received(self) -> bool | None:
        return None  # the client stopped sending: close our side too (asyncio's default)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._expect_continue = False
        self._parsing = True
        self._head_done = False
        self._begun += 1

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        if parser.should_upgrade() and self._upgrade_requested() == b"websocket":
            return  # feed_data raises HttpParserUpgrade next; the WebSocket protocol takes the request
        http_version = parser.get_http_version()
        url = httptools.parse_url(self._url)
        raw_path = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root_path = self.root_path
        scope = {
            "type": "http",
            "asgi": _ASGI_VERSION,
            "http_version": http_version,
            "server": self.server_address,
            "client": self.client_address,
            "scheme": "http",
            "method": parser.get_method().decode("ascii"),
            "root_path": root_path,
            "path": root_path + path if root_path else path,
            "raw_path": root_path.encode("ascii") + raw_path if root_path else raw_path,
            "query_string": url.query or b"",
            "headers": self._headers,
            "state": self.app_state.copy(),
        }
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        exchange = self._current = Exchange(self, scope, keep_alive, self._expect_continue)
        self._head_done = True
        active = self._active
        if active is None or active.complete:
            self._start(exchange)
        else:  # pipelined: it waits its turn, and reading waits with it
            self.pause_reading()
            self._pipeline.append(exchange)

    def on_body(self, body: bytes) -> None:
        if self._current is not None:
            self._current.feed(body)

    def on_message_complete(self) -> None:
        self._parsing = False
        if self._current is not None:
            self._current.end_of_body()

    # The exchanges' side

    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    async def drain(self) -> None:
        """Until the transport's write buffer is below its low-water mark again."""
        if self.write_paused:
            if self._drained is None:
                self._drained = self.loop.create_future()
            await asyncio.shield(self._drained)

    def pause_reading(self) -> None:
        if not self.read_paused and self.transport is not None:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read from the socket again (callers look at `read_paused` first: this is the hot path's)."""
        if self.read_paused and self.transport is not None:
            self.read_paused = False
            self.transport.resume_reading()

    def response_complete(self, exchange: Exchange) -> None:
        """The app sent `exchange`'s last byte: close, or start the next request."""
        self.server_state.total_requests += 1
        if not exchange.keep_alive:
            self.close()
            return
        if self.transport is None or self.transport.is_closing():
            return
        if self.read_paused:
            self.resume_reading()
        if self._pipeline:
            self._start(self._pipeline.popleft())
        self._settle_phase()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close now if no request is being answered, else after its answer."""
        active = self._active
        if active is None or active.complete:
            self.close()
        else:
            active.keep_alive = False
            for waiting in self._pipeline:
                waiting.keep_alive = False

    # Internals

    def _start(self, exchange: Exchange) -> None:
        self._active = exchange
        task = self.loop.create_task(exchange.run(self.app))
        tasks = self.server_state.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def _upgrade_requested(self) -> bytes | None:
        """The protocol named by `Upgrade` when `Connection` asks for one, lower-cased."""
        connection: list[bytes] = []
        upgrade = None
        for name, value in self._headers:
            if name == b"connection":
                connection = [token.strip().lower() for token in value.split(b",")]
            elif name == b"upgrade":
                upgrade = value.lower()
        return upgrade if b"upgrade" in connection else None

    def _hand_over_to_websocket(self) -> None:
        """Replay the upgrade request to uvicorn's WebSocket protocol and leave the transport to it."""
        assert self.transport is not None and self.config.ws_protocol_class is not None
        self._cancel_timer()
        self._upgraded = True
        self.server_state.connections.discard(self)
        request = [self.parser.get_method(), b" ", self._url, b" HTTP/1.1\r\n"]
        for name, value in self._headers:
            request += [name, b": ", value, b"\r\n"]
        request.append(b"\r\n")
        protocol = self.config.ws_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.app_state
        )
        protocol.connection_made(self.transport)
        protocol.data_received(b"".join(request))
        self.transport.set_protocol(protocol)

    def _refuse_unparsable(self, reason: str) -> None:
        """400 problem+json and close; while an earlier request is being answered, close after it."""
        log.warning("Invalid HTTP request received: %s", reason)
        active = self._active
        if active is not None and not active.complete:
            active.keep_alive = False
            self.pause_reading()
            return
        detail = f"the request is not valid HTTP/1.1: {reason}"
        body = orjson.dumps(problem_body(400, "malformed-http", "Malformed HTTP request", detail))
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        head += [b"%s: %s\r\n" % header for header in self.server_state.default_headers]
        head.append(
            b"content-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (PROBLEM_MEDIA_TYPE.encode(), len(body))
        )
        assert self.transport is not None
        self.transport.write(b"".join(head) + body)
        self.close()

    # Deadlines

    def _enter(self, phase: _Phase) -> None:
        """The connection now waits for `phase`, from now; the timer must fire by that phase's deadline."""
        self._phase = phase
        if phase == "app":
            return
        self._since = self.loop.time()
        deadline = self._deadline()
        if self._timer is None:
            self._arm(deadline)
        elif self._timer_at > deadline:  # the pending timer would be late for this phase
            self._timer.cancel()
            self._arm(deadline)

    def _settle_phase(self) -> None:
        """After a request's end or a response's: wait for the app, or for the client's next request."""
        if self._parsing or self._upgraded:
            return  # a head or body in progress keeps its own clock
        active = self._active
        busy = (active is not None and not active.complete) or bool(self._pipeline)
        phase: _Phase = "app" if busy else "idle"
        if phase != self._phase:  # bytes that begin no request (CRLFs) leave the idle clock running
            self._enter(phase)

    def _deadline(self) -> float:
        limits = self.limits
        if self._phase == "head":
            return self._since + limits.header_timeout_s
        if self._phase == "body":
            return self._since + limits.body_timeout_s
        return self._since + limits.keep_alive_s

    def _arm(self, when: float) -> None:
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if self._upgraded or self.closing() or self._phase == "app":
            return  # the next phase with a deadline arms the timer again
        deadline = self._deadline()
        if self.loop.time() + _TIMER_SLACK_S >= deadline:
            self.close()
        else:
            self._arm(deadline)


def _address(address: Any) -> tuple[str, int] | None:
    """A socket address as ASGI's `(host, port)`, None for a Unix socket's."""
    if isinstance(address, tuple) and len(address) >= 2:
        return (str(address[0]), int(address[1]))
    return None


def _too_many_connections(limit: int) -> ASGIApp:
    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        await gym_error_problem(TooManyConnections(limit, _RETRY_AFTER_S))(scope, receive, send)

    return answer
