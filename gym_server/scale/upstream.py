"""A keep-alive HTTP/1.1 connection pool to one replica, parsed with httptools.

The entry point forwards every step, so the hop must cost little next to a 0.2 ms step: a general
client (httpx) spent more on its own bookkeeping than the replica on the step. This one writes the
request in one buffer and parses the answer with the same C parser uvicorn uses; a connection goes
back to the pool after each answer the replica keeps alive.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

import httptools

# Headers that describe one hop, not the message: never forwarded either way (RFC 9110, 7.6.1).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"content-length",
        b"host",
    }
)
# Not forwarded to a replica either: the entry point checked `Origin` against its own host (the replica,
# asked under its own address, would see every browser's request as cross-origin).
_CHECKED_AT_ENTRY = HOP_BY_HOP | {b"origin"}
_READ_CHUNK = 256 * 1024


class UpstreamError(Exception):
    """The replica could not be reached, or hung up before a whole answer."""


@dataclass
class UpstreamResponse:
    """One whole answer from a replica (bodies are buffered: the gym's answers are small JSON)."""

    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    complete: bool = False
    keep_alive: bool = False

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() not in HOP_BY_HOP:
            self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def exchange(self, request: bytes) -> UpstreamResponse:
        self.writer.write(request)
        response = UpstreamResponse()
        parser = httptools.HttpResponseParser(response)
        received = False
        while not response.complete:
            data = await self.reader.read(_READ_CHUNK)
            if not data:
                raise _ClosedEarly(received)
            received = True
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as exc:
                raise UpstreamError(f"unparsable answer: {exc}") from exc
        response.status = parser.get_status_code()
        response.keep_alive = parser.should_keep_alive()
        return response

    def close(self) -> None:
        self.writer.close()


class _ClosedEarly(UpstreamError):
    def __init__(self, received: bool) -> None:
        super().__init__("the replica closed the connection before a whole answer")
        self.received = received


class UpstreamPool:
    """Idle keep-alive connections to one replica (`host:port`), opened on demand, at most `max_idle`."""

    def __init__(self, host: str, port: int, *, connect_timeout_s: float = 2.0, max_idle: int = 512) -> None:
        self.host, self.port = host, port
        self._connect_timeout_s = connect_timeout_s
        self._max_idle = max_idle
        self._idle: deque[_Connection] = deque()
        self._host_header = f"{host}:{port}".encode()

    async def request(
        self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        """Send one request and return the whole answer.

        A request that met a pooled connection the replica had just closed (its keep-alive timeout) is
        sent again on a new one: the replica never read it. Anything else is an `UpstreamError`.
        """
        head = [method.encode(), b" ", target, b" HTTP/1.1\r\nhost: ", self._host_header, b"\r\n"]
        for name, value in headers:
            if name not in _CHECKED_AT_ENTRY:
                head += [name, b": ", value, b"\r\n"]
        head += [b"content-length: ", str(len(body)).encode(), b"\r\n\r\n", body]
        request = b"".join(head)
        while self._idle:
            connection = self._idle.pop()
            try:
                response = await connection.exchange(request)
            except _ClosedEarly as exc:
                connection.close()
                if exc.received:
                    raise
                continue  # a stale pooled connection: try the next, then a new one
            except OSError:
                connection.close()
                continue  # reset before any answer: as stale; a dead replica then refuses the new one
            except UpstreamError:
                connection.close()
                raise
            return self._release(connection, response)
        connection = await self._connect()
        try:
            response = await connection.exchange(request)
        except (OSError, UpstreamError) as exc:
            connection.close()
            raise UpstreamError(str(exc) or type(exc).__name__) from exc
        return self._release(connection, response)

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self._connect_timeout_s
            )
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return _Connection(reader, writer)

    def _release(self, connection: _Connection, response: UpstreamResponse) -> UpstreamResponse:
        if response.keep_alive and len(self._idle) < self._max_idle:
            self._idle.append(connection)
        else:
            connection.close()
        return response

    def close(self) -> None:
        """Close every idle connection (the replica is gone or the entry point stops)."""
        while self._idle:
            self._idle.pop().close()
