"""The gateway's HTTP/1.1 client for its upstreams: pooled keep-alive connections on asyncio, responses
parsed by httptools (uvicorn's parser, already the server's own).

Why not httpx: a call through httpx's `AsyncClient` costs about 0.7 ms of CPU (its request and response
models, anyio streams and h11, in Python), httpcore alone 0.6 ms; this client about 0.04 ms for the same
answer of 600 prompt ids (docs/benchmarks.md#episode-gateway). The gateway makes one such call per agent
call, so that was most of its overhead. It does what the gateway needs and no more: one request at a time
per connection, the request written in one piece, the answer's body whole or chunk by chunk as it comes
(chunked transfer decoded, nothing decompressed: no `Accept-Encoding` is sent), no redirects followed (a
redirect could lead outside the allow-list), no proxy variables read (the upstream is an allow-listed
policy server, reached directly). HTTPS upstreams are verified as httpx verifies them (its SSL context).

Timeouts, as httpx's were: `connect_timeout_s` to connect (beyond it the upstream is unreachable), and
`read_timeout_s` for each wait on the answer (its head, then each read of its body, so a long stream is
never cut while it flows). Above both, each call has a `deadline` (the event loop's clock) no wait
passes: an upstream sending a byte now and then, each within the read timeout, held a call for as long
as it liked (issue 37). A connection taken from the pool that the upstream had closed meanwhile (its
keep-alive ran out) is retried once on a new one when not one byte of an answer came. Interim answers
(1xx, such as 103 Early Hints) are skipped: the answer is the final one that follows.

Where requests go is a `Target`, made from the URL the allow-list checked (`httpx.URL`, the one parse
of it): a second parser of the same text disagreed with the check on ports and dot segments (issue 37).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final, cast

import httptools
import httpx

__all__ = ["Target", "UpstreamClient", "UpstreamError", "UpstreamResponse", "UpstreamTooLarge"]

_PAUSE_AT: Final = 1 << 20  # bytes of body held unread before the socket stops being read


class UpstreamError(Exception):
    """The upstream was not reached, broke off, or was too slow. `kind` names what happened, as httpx's
    exception classes did (the gateway's message says it); `timeout` is a read that waited too long."""

    def __init__(self, kind: str, *, timeout: bool = False) -> None:
        super().__init__(kind)
        self.kind, self.timeout = kind, timeout


class UpstreamTooLarge(UpstreamError):
    """The answer's body is larger than the reader's limit (said by its Content-Length, or read so far)."""

    def __init__(self, size: int) -> None:
        super().__init__("TooLarge")
        self.size = size


@dataclass(frozen=True, slots=True)
class _Origin:
    """Where a URL's requests go: the pool key, and the request line's and `Host` header's parts."""

    scheme: str
    host: str
    port: int
    host_header: bytes


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes: its origin (the pool's key) and the request line's path."""

    origin: _Origin
    path: str

    @classmethod
    def of(cls, url: httpx.URL) -> Target:
        """The target of an already parsed URL: its parts as they are, nothing parsed again."""
        port = url.port or (443 if url.scheme == "https" else 80)
        host = url.raw_host.decode("ascii")
        origin = _Origin(url.scheme, host, port, url.netloc)
        return cls(origin, url.raw_path.decode("ascii") or "/")

    def join(self, path: str) -> Target:
        """The target of `path` below this one (`/v1/models` below a server root)."""
        return Target(self.origin, self.path.rstrip("/") + path)


class _Connection(asyncio.Protocol):
    """One keep-alive connection and the answer being read on it (httptools calls the `on_*` methods)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.head_done = self.complete = self.received = self.keep_alive = False
        self.sized = False  # a Content-Length or chunked answer: its end is known without the EOF
        self.length: int | None = None  # the answer's Content-Length
        self.interim = False  # a 1xx answer's head came: its end is skipped
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.error: UpstreamError | None = None
        self.waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one without the base class

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.error = UpstreamError("RemoteProtocolError")
            self._close()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and not self.sized and not self.complete and self.error is None:
            self.complete = True  # an answer delimited by the end of the connection
        elif not self.complete and self.error is None:
            self.error = UpstreamError("RemoteProtocolError" if self.received else "ConnectionClosed")
        self._wake()

    # -- httptools callbacks ----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in (b"content-length", b"transfer-encoding"):
            self.sized = True
        if name == b"content-length" and value.strip().isdigit():
            self.length = int(value)

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer: the final one follows on the same connection
            self.interim, self.sized, self.length = True, False, None
            return
        self.status, self.head_done = status, True
        self.keep_alive = self.parser.should_keep_alive()  # known from the head (llhttp forgets it after)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _PAUSE_AT and self.transport is not None:
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.complete = True

    # -- the reader's side ------------------------------------------------------------------------

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def wait(self, timeout_s: float, deadline: float) -> None:
        """Until the parser has something new (or the connection ends); raises on a failure, and when
        `timeout_s` passes or the loop's clock reaches `deadline` first."""
        if self.error is not None:
            raise self.error
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        left = deadline - loop.time()
        timer = (
            loop.call_later(timeout_s, self._timed_out, "ReadTimeout")
            if timeout_s < left
            else loop.call_later(max(left, 0.0), self._timed_out, "Deadline")
        )
        try:
            await self.waiter
        finally:
            timer.cancel()
            self.waiter = None
        if self.error is not None:
            raise self.error

    def _timed_out(self, kind: str) -> None:
        self.error = UpstreamError(kind, timeout=True)
        self._close()
        self._wake()

    def take(self) -> bytes:
        chunk = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks.clear()
        if self.buffered > _PAUSE_AT and self.transport is not None and not self.closed:
            self.transport.resume_reading()
        self.buffered = 0
        return chunk


class UpstreamResponse:
    """An answer whose status line and headers have come; its body is read with `read` or `stream`,
    and `close` gives the connection back (to the pool when the answer was read to its end)."""

    def __init__(
        self, client: UpstreamClient, origin: _Origin, connection: _Connection, deadline: float
    ) -> None:
        self._client, self._origin, self._deadline = client, origin, deadline
        self._connection: _Connection | None = connection
        self.status = connection.status

    async def read(self, limit: int) -> bytes:
        """The whole body; the connection goes back to the pool.

        Raises:
            UpstreamTooLarge: the body is over `limit` bytes: refused on its Content-Length before any
                of it is read, else once that much came (the connection is closed, never pooled).
        """
        length = self._connection.length if self._connection is not None else None
        if length is not None and length > limit:
            self.close()
            raise UpstreamTooLarge(length)
        parts: list[bytes] = []
        size = 0
        async for chunk in self.stream():
            size += len(chunk)
            if size > limit:
                self.close()
                raise UpstreamTooLarge(size)
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def stream(self) -> AsyncIterator[bytes]:
        """The body's pieces as they arrive (each wait at most the read timeout, all of them within the
        call's deadline), then the release."""
        connection = self._connection
        assert connection is not None, "the body was read already"
        try:
            while True:
                if connection.chunks:
                    yield connection.take()
                if connection.complete:
                    if connection.chunks:
                        yield connection.take()
                    break
                await connection.wait(self._client.read_timeout_s, self._deadline)
        finally:
            self.close()

    def close(self) -> None:
        """Give the connection back: to the pool if its answer was read to the end, else closed."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if connection.complete and not connection.chunks and connection.keep_alive:
            self._client.release(self._origin, connection)
        else:
            connection._close()


class UpstreamClient:
    """The pooled client all episodes' gateways share (one request at a time per connection)."""

    def __init__(self, *, connect_timeout_s: float, read_timeout_s: float, max_idle: int = 256) -> None:
        self.connect_timeout_s, self.read_timeout_s = connect_timeout_s, read_timeout_s
        self.max_idle = max_idle  # kept connections per origin
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection._close()
        self._idle.clear()

    async def request(
        self, method: str, target: Target, headers: dict[str, str], body: bytes, *, deadline: float
    ) -> UpstreamResponse:
        """Send the request and wait for the answer's head (status and headers); `deadline` (the loop's
        clock) bounds the whole call, its body's reads included.

        Raises:
            UpstreamError: not connected, broken off, or no answer within the read timeout or the
                deadline (`timeout` set, `kind` "ReadTimeout" or "Deadline").
        """
        origin = target.origin
        head = _head(method, target.path, origin, headers, len(body))
        while True:
            connection, reused = self._idle_connection(origin), True
            if connection is None:
                connection, reused = await self._connect(origin), False
            assert connection.transport is not None
            connection.transport.write(head + body)
            try:
                while not connection.head_done:
                    await connection.wait(self.read_timeout_s, deadline)
            except UpstreamError as exc:
                connection._close()
                if reused and exc.kind == "ConnectionClosed":
                    continue  # the pool's connection had been closed by the upstream: once more, anew
                raise
            except BaseException:  # cancelled: the answer would come to nobody, on a connection in use
                connection._close()
                raise
            return UpstreamResponse(self, origin, connection, deadline)

    def release(self, origin: _Origin, connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if connection.closed or len(idle) >= self.max_idle:
            connection._close()
            return
        connection._reset()  # its parser reads the next answer of the keep-alive connection
        idle.append(connection)

    def _idle_connection(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if not connection.closed and not connection.received:
                return connection
            connection._close()  # closed by the upstream while idle, or sent bytes unasked
        return None

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        secure = origin.scheme == "https"
        if secure and self._ssl is None:
            self._ssl = httpx.create_ssl_context()  # the trust httpx gave the gateway before
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    _Connection,
                    origin.host,
                    origin.port,
                    ssl=self._ssl if secure else None,
                    server_hostname=origin.host if secure else None,
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise UpstreamError("ConnectTimeout") from None
        except (OSError, ssl.SSLError):
            raise UpstreamError("ConnectError") from None
        return connection


def _head(method: str, target: str, origin: _Origin, headers: dict[str, str], length: int) -> bytes:
    """The request line and headers; a header with a line break or NUL (an API key pasted with its
    newline) would split the request, so it is refused rather than sent."""
    lines = [f"{method} {target} HTTP/1.1\r\n".encode("ascii"), b"Host: ", origin.host_header, b"\r\n"]
    try:
        for name, value in headers.items():
            if any(c in value for c in "\r\n\0") or any(c in name for c in "\r\n\0: "):
                raise UpstreamError("LocalProtocolError")
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    except UnicodeEncodeError:
        raise UpstreamError("LocalProtocolError") from None
    lines.append(b"Accept: */*\r\nContent-Length: %d\r\n\r\n" % length)
    return b"".join(lines)
