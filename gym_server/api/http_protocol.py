"""uvicorn's httptools protocol with the deadlines it lacks, so a slow or half-open client cannot hold the
server's connections forever.

uvicorn closes a connection idle *between* requests (`timeout_keep_alive`), but nothing bounds the time
a client takes to send a request: one that connects and sends nothing, or half a head, or a head and
half its body, holds its connection (and a file descriptor, and for a body an ASGI task) until it
leaves. This subclass adds, per connection (`HttpSettings`):

- a head deadline, `header_timeout_s`: armed when the connection opens, and again when bytes arrive
  while no request is in progress (the next request on a kept-alive connection, or junk between
  requests); cancelled once a request's head is complete. It is armed only when a head is still
  incomplete after a read, so a request that arrives whole, the usual case, costs no timer at all;
- a body deadline, `body_timeout_s`: from the end of a head to the end of its body, armed likewise only
  when a read leaves the body incomplete. At the deadline the connection is closed; the app's pending
  `receive()` gets `http.disconnect`;
- a connection cap, `max_connections`: a request on a connection opened beyond it is answered 503
  problem+json with `Retry-After` and `Connection: close`, without reaching the app.

Once a request is whole, nothing here limits how long the app takes to answer it (a run with
`wait: true` may take minutes): only the client's side of the exchange is on a clock. A connection
upgraded to a WebSocket (the OpenEnv facade's `/ws`) leaves this protocol for uvicorn's WebSocket one,
whose pings and close handshake bound it; no deadline of this protocol may close it afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Literal

from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gym_server.core.errors import TooManyConnections
from gym_server.core.problems import gym_error_problem
from gym_server.core.settings import HttpSettings

__all__ = ["GuardedHttpProtocol", "guarded_protocol"]

_RETRY_AFTER_S = 1

_Phase = Literal["head", "body", "app"]


def guarded_protocol(limits: HttpSettings) -> type[GuardedHttpProtocol]:
    """The protocol class for `uvicorn.run(http=...)`, bound to `limits` (one instance per connection)."""
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,), {"limits": limits})


class GuardedHttpProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` plus head and body deadlines and a connection cap; see the module docstring.

    The phase of the exchange is read from uvicorn's own state after each read rather than tracked by
    overriding the parser callbacks, which measured about 1.5 µs more per request: a new head replaces
    `self.scope` when it begins and gets a cycle of its own when it is complete, and that cycle's
    `more_body` stays true until the body's end.
    """

    limits: ClassVar[HttpSettings]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: _Phase = "head"  # what the armed deadline waits for
        self._upgraded = False  # handed to the WebSocket protocol: the transport is no longer ours

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self.app = _too_many_connections(self.limits.max_connections)
        self._arm("head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._upgraded or self.transport.is_closing():
            return
        phase = self._waiting_for()
        if self._deadline is not None:
            if phase == self._phase:
                return  # more of the same: bytes trickling in do not move the deadline
            self._disarm()
        if phase != "app":
            self._arm(phase)

    def handle_websocket_upgrade(self) -> None:
        self._disarm()
        self._upgraded = True
        super().handle_websocket_upgrade()

    def _waiting_for(self) -> _Phase:
        """What the connection waits for now: the client's head or body, or the app's answer."""
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope:
            return "head"  # a head has begun (or only bytes that begin none) and is not complete
        if cycle.more_body:
            return "body"
        # Bytes after an answered request that began no new one (CRLFs) stopped uvicorn's keep-alive
        # timer: they get the head deadline instead.
        return "head" if cycle.response_complete else "app"

    def _arm(self, phase: _Phase) -> None:
        delay = self.limits.body_timeout_s if phase == "body" else self.limits.header_timeout_s
        self._phase, self._deadline = phase, self.loop.call_later(delay, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def _too_many_connections(limit: int) -> Any:
    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        await gym_error_problem(TooManyConnections(limit, _RETRY_AFTER_S))(scope, receive, send)

    return answer
