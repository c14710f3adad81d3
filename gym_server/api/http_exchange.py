"""One HTTP/1.1 request and its response, as the ASGI app sees them: `receive`, `send` and the task that
runs the app.

The connection (`http_protocol.GymHttpProtocol`) parses the request and feeds its body in; this module
frames the response. A response whose length is known (Starlette's, all but streams) is one write: its
head waits for the body message that follows it at once and goes with it, so a small JSON answer is one
`send` on the socket, not two. A stream's head goes at once, each chunk when it comes. The app is run
once, its failures turned into the answers uvicorn gives (a 500 when nothing was sent yet, else the
connection closed), logged on uvicorn's error logger where operators already look.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Scope

if TYPE_CHECKING:
    from gym_server.api.http_protocol import GymHttpProtocol

__all__ = ["HIGH_WATER_BYTES", "Exchange"]

log = logging.getLogger("uvicorn.error")

# A request body buffered past this (the app not reading it yet) pauses reading from the socket.
HIGH_WATER_BYTES = 64 * 1024
# A body at least this long is handed to the transport beside the head rather than copied after it.
_COPY_BELOW_BYTES = 16 * 1024

# What a response's header may not hold (uvicorn's rules): in a name, control characters and separators;
# in a value, control characters but tab. A CR or LF there would split the response. Checked with
# `bytes.translate` over all names and all values at once: regular expressions cost 10 µs a response
# (measured cross-process: the `re` engine's code is cold between two requests; docs/benchmarks.md).
_NAME_FORBIDDEN = bytes(range(0x20)) + b'\x7f()<>@,;:[]={} \\"'
_VALUE_FORBIDDEN = bytes(range(0x09)) + bytes(range(0x0A, 0x20)) + b"\x7f"
# The headers that decide how the body is framed and whether the connection stays open.
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


_STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}
_INTERNAL_ERROR = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"21"),
    (b"connection", b"close"),
]


_rendered_defaults: tuple[list[tuple[bytes, bytes]], bytes] = ([], b"")


def _default_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers (`Date`, `Server`) rendered, once per list: its main loop replaces the
    list when the date changes, once a second, and builds it from values it checked itself."""
    global _rendered_defaults
    if _rendered_defaults[0] is not headers:
        _rendered_defaults = (
            headers,
            b"".join(b"%s: %s\r\n" % (name.lower(), value) for name, value in headers),
        )
    return _rendered_defaults[1]


class Exchange:
    """A request's state between the parser and the app, and the framing of its response.

    Body bytes arrive with `feed`; the end of the body with `end_of_body`; a lost connection with
    `disconnect`. The app reads them with `receive` and answers with `send`, both as ASGI specifies.
    """

    __slots__ = (
        "_body",
        "_chunked",
        "_delivered_last",
        "_expect_continue",
        "_head",
        "_left",
        "_waiter",
        "complete",
        "connection",
        "disconnected",
        "keep_alive",
        "more_body",
        "scope",
        "started",
        "transport",
    )

    def __init__(self, connection: GymHttpProtocol, scope: Scope, keep_alive: bool, expect_continue: bool):
        assert connection.transport is not None
        self.connection = connection
        self.transport = connection.transport
        self.scope = scope
        self.keep_alive = keep_alive  # False: the connection closes once this response is sent
        self.more_body = True  # the request's body has not all arrived
        self.started = False  # the app sent the response's head
        self.complete = False  # the app sent the response's last body message
        self.disconnected = False  # the connection was lost before the response was complete
        self._expect_continue = expect_continue  # `Expect: 100-continue`, not answered yet
        # Body received, not yet handed to the app: the one read's bytes as they came, or a bytearray
        # the later reads are appended to (a large one is then one block, which glibc maps and unmaps on
        # its own, rather than dozens of 64 KiB pieces kept in the heap between other objects).
        self._body: bytes | bytearray = b""
        self._delivered_last = False  # the app got the body's last message
        self._waiter: asyncio.Future[None] | None = None  # `receive` waiting for bytes or the end
        self._head: bytes | None = None  # the response's head, not written yet
        self._chunked = False  # the response is sent in chunked transfer coding
        self._left: int | None = None  # bytes the response's Content-Length still owes

    # The connection's side

    def feed(self, body: bytes) -> None:
        """Request body bytes from the parser (dropped once the response is complete)."""
        if self.complete:
            return
        buffered = self._body
        if not buffered:
            self._body = buffered = body
        else:
            if isinstance(buffered, bytes):
                self._body = buffered = bytearray(buffered)
            buffered += body
        if len(buffered) > HIGH_WATER_BYTES:
            self.connection.pause_reading()
        if self._waiter is not None:
            self._wake()

    def end_of_body(self) -> None:
        self.more_body = False
        if self._waiter is not None:
            self._wake()

    def disconnect(self) -> None:
        """The connection is gone: a pending `receive` returns `http.disconnect`, `send` does nothing."""
        if not self.complete:
            self.disconnected = True
        self._wake()

    async def run(self, app: ASGIApp) -> None:
        """Run `app` for this request; what it leaves unanswered is answered or closed here."""
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:  # the app's failure is this request's, not the server's
            log.error("Exception in ASGI application\n", exc_info=exc)
            self._fail()
        else:
            if not self.complete and not self.disconnected:
                log.error(
                    "ASGI callable returned without %s response.",
                    "completing" if self.started else "starting",
                )
                self._fail()

    def _fail(self) -> None:
        """A 500 if nothing of the response reached the socket yet, else close the connection."""
        if self.complete or self.disconnected:
            return
        if self._head is not None or not self.started:  # nothing written: the app's head is replaced
            self._head, self._chunked, self._left = self._render_head(500, _INTERNAL_ERROR), False, 21
            self.keep_alive = False
            self._write_body(b"Internal Server Error", more_body=False)
        else:
            self.connection.close()

    # The app's side

    async def receive(self) -> Message:
        if self._expect_continue:
            self._expect_continue = False
            if not self.started and not self.transport.is_closing():
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        while True:
            if self.disconnected or self.complete:
                return {"type": "http.disconnect"}
            if self._body or (not self.more_body and not self._delivered_last):
                body, self._body = self._body, b""
                self._delivered_last = not self.more_body
                if self.connection.read_paused:
                    self.connection.resume_reading()
                data = bytes(body) if isinstance(body, bytearray) else body
                return {"type": "http.request", "body": data, "more_body": self.more_body}
            # More body to come, or (all of it delivered) the end of the exchange.
            self.connection.resume_reading()
            self._waiter = self.connection.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def send(self, message: Message) -> None:
        connection = self.connection
        if connection.write_paused and not self.disconnected:
            await connection.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            head = self._render_head(message["status"], message.get("headers", ()))
            self.started = True
            self._expect_continue = False
            if self._left is None:  # a stream: its head goes now, its chunks whenever they come
                self.transport.write(head)
            else:  # a body of known length follows at once (Starlette's responses): one write for both
                self._head = head
            return
        if self.complete:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")
        if kind != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
        self._write_body(message.get("body", b""), more_body=message.get("more_body", False))

    # Framing

    def _render_head(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        """The status line and headers; sets the body's framing (length, chunked) and keep-alive."""
        lines: list[bytes] = [_default_lines(self.connection.server_state.default_headers)]
        names: list[bytes] = []
        values: list[bytes] = []
        length: int | None = None
        chunked = close = False
        for name, value in headers:
            name = name.lower()
            if name in _FRAMING:
                if name == b"content-length":
                    if length is None and not chunked:
                        length = int(value)
                elif name == b"transfer-encoding":
                    if value.lower() == b"chunked":
                        chunked, length = True, None
                elif b"close" in (token.strip().lower() for token in value.split(b",")):
                    close = True
            names.append(name)
            values.append(value)
            lines.append(b"%s: %s\r\n" % (name, value))
        name_bytes, value_bytes = b"".join(names), b"".join(values)
        if len(name_bytes.translate(None, _NAME_FORBIDDEN)) != len(name_bytes) or not name_bytes.isascii():
            raise RuntimeError(f"Invalid HTTP header name: {names!r}")
        if len(value_bytes.translate(None, _VALUE_FORBIDDEN)) != len(value_bytes):
            raise RuntimeError(f"Invalid HTTP header value: {values!r}")
        block = b"".join(lines)
        bodiless = self.scope["method"] == "HEAD" or status in (204, 304) or status < 200
        if length is None and not chunked and not bodiless:
            if self.scope["http_version"] == "1.1":
                chunked = True
                block += b"transfer-encoding: chunked\r\n"
            else:  # HTTP/1.0 knows no chunks: the body ends where the connection does
                self.keep_alive = False
        if close:
            self.keep_alive = False
        elif not self.keep_alive:
            block += b"connection: close\r\n"
        self._chunked, self._left = chunked, (0 if bodiless else length)
        return (_STATUS_LINES.get(status) or _status_line(status)) + block + b"\r\n"

    def _write_body(self, body: bytes, *, more_body: bool) -> None:
        if self.scope["method"] == "HEAD":
            body = b""
        elif self._chunked:
            framed = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            body = framed if more_body else framed + b"0\r\n\r\n"
        elif self._left is not None:
            if len(body) > self._left:
                raise RuntimeError("Response content longer than Content-Length")
            self._left -= len(body)
        head, self._head = self._head, None
        if head is None:
            if body:
                self.transport.write(body)
        elif len(body) < _COPY_BELOW_BYTES:
            self.transport.write(head + body)
        else:
            self.transport.writelines((head, body))
        if more_body:
            return
        if self._left:
            raise RuntimeError("Response content shorter than Content-Length")
        self.complete = True
        if self._waiter is not None:
            self._wake()
        self.connection.response_complete(self)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
