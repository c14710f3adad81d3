"""A real uvicorn server running the gym's HTTP/1.1 protocol in a thread, a raw HTTP/1.1 client that
reads responses byte-exact (pipelined ones one at a time, chunk framing kept), and small ASGI apps:
what tests/api/test_http_protocol.py drives the protocol with."""

from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.api.http_protocol import http_protocol
from gym_server.core.settings import HttpSettings

# How long a socket read waits, and how long the server may take to be seen closing, on a busy machine.
WAIT_S = 10.0


# The server


@dataclass
class Served:
    """A uvicorn server with the gym's protocol, running in a thread of its own."""

    server: uvicorn.Server
    thread: threading.Thread
    port: int

    def connect(self) -> Client:
        return Client(socket.create_connection(("127.0.0.1", self.port), timeout=WAIT_S))

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(WAIT_S)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the server did not stop"


def start_server(app: ASGIApp, limits: HttpSettings | None = None) -> Served:
    """uvicorn with the gym's protocol (`limits`, else the defaults) serving `app` on a free loopback
    port, in a thread of its own; `Served.stop()` ends it."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        loop="uvloop",
        http=http_protocol(limits or HttpSettings()),
        log_config=None,
        log_level="warning",
        lifespan="off",
        proxy_headers=False,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    return Served(server, thread, server.servers[0].sockets[0].getsockname()[1])


# A raw HTTP/1.1 client


@dataclass
class Response:
    status: int
    head: bytes  # the status line and headers, through the blank line
    headers: list[tuple[str, str]]  # names lower-cased
    body: bytes = b""  # the body, chunks decoded
    framed: bytes = b""  # the body as it came on the wire (chunk sizes and all)

    def header(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key == name]
        assert len(values) <= 1, f"{name} sent {len(values)} times: {self.head!r}"
        return values[0] if values else None


class Client:
    """One connection, read through a buffer so that pipelined responses can be taken one at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.eof = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self) -> bool:
        """Whatever the server sent next into the buffer; False at its close (a reset counts)."""
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError:
            data = b""
        self.eof = not data
        self.buffer += data
        return not self.eof

    def _fill(self) -> None:
        if self.eof or not self._read():
            raise AssertionError(f"the server closed the connection; had {bytes(self.buffer)[:300]!r}")

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def _line(self) -> bytes:
        """Through the next CRLF (included)."""
        while (end := self.buffer.find(b"\r\n")) < 0:
            self._fill()
        return self._take(end + 2)

    def peek_head(self) -> bytes:
        """The next response's head, left in the buffer."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        return bytes(self.buffer[: end + 4])

    def response(self, method: str = "GET") -> Response:
        """The next response (an interim 1xx one too), its body framed by its headers or the close."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        head = self._take(end + 4)
        status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
        version, status, *_ = status_line.split(" ", 2)
        assert version == "HTTP/1.1", head
        headers = []
        for line in lines:
            name, sep, value = line.partition(":")
            assert sep and name == name.strip(), f"not a header line: {line!r}"
            headers.append((name.lower(), value.strip()))
        response = Response(int(status), head, headers)
        if method == "HEAD" or response.status in (204, 304) or response.status < 200:
            return response
        length = response.header("content-length")
        if (response.header("transfer-encoding") or "").lower() == "chunked":
            assert length is None, head
            framed, body = bytearray(), bytearray()
            while True:
                size_line = self._line()
                size = int(size_line.split(b";")[0], 16)
                framed += size_line
                if size == 0:
                    while (trailer := self._line()) != b"\r\n":
                        framed += trailer
                    framed += trailer
                    break
                chunk = self._take(size + 2)
                assert chunk.endswith(b"\r\n"), chunk[-20:]
                framed += chunk
                body += chunk[:-2]
            response.framed, response.body = bytes(framed), bytes(body)
        elif length is not None:
            response.body = response.framed = self._take(int(length))
        else:
            response.body = response.framed = self.until_close()
        return response

    def until_close(self) -> bytes:
        """Everything the server sends until it closes the connection (fails if it does not, in WAIT_S)."""
        while not self.eof and self._read():
            pass
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    def quiet(self, seconds: float) -> bool:
        """Nothing arrives (and the connection stays open) for `seconds`."""
        return not self.buffer and not select.select([self.sock], [], [], seconds)[0]


def request(method: str, path: str, body: bytes = b"", *headers: str, version: str = "1.1") -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "Host: localhost", *headers]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# Small ASGI apps


async def read_body(receive: Receive) -> tuple[bytes, int]:
    """The whole request body, and how many `http.request` messages carried it."""
    body, messages = b"", 0
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        body += message.get("body", b"")
        messages += 1
        if not message.get("more_body", False):
            return body, messages


async def answer(
    send: Send, body: bytes, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A response with a Content-Length, as Starlette's are: its start, then its whole body."""
    extra = headers or []
    start_headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": body})


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers `<method> <path> <body>`."""
    body, _ = await read_body(receive)
    await answer(send, f"{scope['method']} {scope['path']} ".encode() + body)


def recording_echo(scopes: list[Scope]) -> ASGIApp:
    """`echo`, keeping each request's scope in `scopes`."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scopes.append(scope)
        await echo(scope, receive, send)

    return app


async def stream(scope: Scope, receive: Receive, send: Send) -> None:
    """A streamed response without Content-Length: `ab`, then `cde`."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ab", "more_body": True})
    await send({"type": "http.response.body", "body": b"cde", "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
