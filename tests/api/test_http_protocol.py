"""The gym's HTTP/1.1 protocol (gym_server/api/http_protocol.py, http_exchange.py) behind a real uvicorn
server on loopback, driven with raw bytes over sockets: keep-alive and pipelining, `Expect:
100-continue`, HEAD, chunked bodies both ways and HTTP/1.0's close-delimited one, `Connection: close`,
malformed requests (400 problem+json), failing apps (500 or a closed connection, never a corrupt
response), header injection, Content-Length mismatches, large bodies, client disconnects, the keep-alive
deadline (which CRLFs do not extend) beside an app that may take as long as it likes, graceful shutdown,
and the ASGI scope. The deadlines, the connection cap and WebSockets under a whole `gym-server serve` are
tests/e2e/test_slow_clients.py's."""

from __future__ import annotations

import asyncio
import hashlib
import json
import queue
import select
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from rawhttp import (
    WAIT_S,
    Client,
    Served,
    answer,
    echo,
    read_body,
    recording_echo,
    request,
    start_server,
    stream,
)
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gym_server.core.settings import HttpSettings

# Small deadlines for the deadline tests; keep_alive_s is whole seconds (HttpSettings).
SHORT = HttpSettings(header_timeout_s=0.5, body_timeout_s=0.5, keep_alive_s=1)


Serve = Callable[..., Served]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """`serve(app, limits)` starts a server on a free loopback port; each is stopped after the test."""
    started: list[Served] = []

    def start(app: ASGIApp, limits: HttpSettings | None = None) -> Served:
        started.append(start_server(app, limits))
        return started[-1]

    yield start
    for served in started:
        served.stop()


# 1. Keep-alive


def test_keep_alive_answers_several_requests_on_one_connection(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        await PlainTextResponse(f"hello {scope['path']}")(scope, receive, send)

    served = serve(app)
    with served.connect() as client:
        for k in range(3):
            client.send(request("GET", f"/r{k}"))
            response = client.response()
            assert response.status == 200
            assert response.body == f"hello /r{k}".encode()
            assert response.header("content-length") == str(len(response.body))
            assert response.header("transfer-encoding") is None
            assert response.header("connection") is None
            assert response.header("content-type") == "text/plain; charset=utf-8"
            assert response.header("date")
        assert client.quiet(0.2), "bytes beyond the three responses"


# 2. Pipelining


def test_pipelined_requests_are_answered_in_order_one_after_another(serve: Serve) -> None:
    events: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        events.append(f"start {scope['path']}")
        body, _ = await read_body(receive)
        # The first one takes longest: were they run at once, the others would end first.
        await asyncio.sleep({"/a": 0.2, "/b": 0.1}.get(scope["path"], 0))
        events.append(f"end {scope['path']}")
        await answer(send, scope["path"].encode() + b":" + body)

    served = serve(app)
    with served.connect() as client:
        client.send(request("POST", "/a", b"one") + request("GET", "/b") + request("POST", "/c", b"three"))
        assert [client.response().body for _ in range(3)] == [b"/a:one", b"/b:", b"/c:three"]
        assert client.quiet(0.2)
    assert events == ["start /a", "end /a", "start /b", "end /b", "start /c", "end /c"]


# 3. Expect: 100-continue


def test_100_continue_is_sent_when_the_app_reads_the_body(serve: Serve) -> None:
    go = threading.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.to_thread(go.wait, WAIT_S)
        await echo(scope, receive, send)

    served = serve(app)
    with served.connect() as client:
        client.send(
            b"POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        assert client.quiet(0.3), "an answer before the app asked for the body"
        go.set()
        interim = client.response()
        assert interim.status == 100 and interim.head == b"HTTP/1.1 100 Continue\r\n\r\n"
        client.send(b"hello")
        final = client.response()
        assert final.status == 200 and final.body == b"POST /up hello"


def test_no_100_continue_when_the_app_answers_without_reading_the_body(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/refuse":
            await answer(send, b"no thanks", status=413)
        else:
            await echo(scope, receive, send)

    served = serve(app)
    with served.connect() as client:
        head = (
            b"POST /refuse HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        client.send(head)
        refused = client.response()
        assert refused.status == 413 and refused.body == b"no thanks"
        assert b"100 Continue" not in refused.head
        # A client may send the body anyway: it is read past, and the connection stays in step.
        client.send(b"hello" + request("GET", "/next"))
        following = client.response()
        assert following.status == 200 and following.body == b"GET /next "


# 4. HEAD


def test_head_sends_the_head_without_the_body_and_the_connection_stays_usable(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(send, b"hello world")  # the body too, as Starlette sends it for HEAD

    served = serve(app)
    with served.connect() as client:
        client.send(request("HEAD", "/thing"))
        head = client.response("HEAD")
        assert head.status == 200 and head.header("content-length") == "11"
        assert head.header("transfer-encoding") is None
        client.send(request("GET", "/thing"))
        # Body bytes of the HEAD response would come first here and break the status line.
        got = client.response()
        assert got.status == 200 and got.body == b"hello world"
        assert client.quiet(0.2)


def test_head_of_a_stream_has_no_body_and_no_chunks(serve: Serve) -> None:
    served = serve(stream)
    with served.connect() as client:
        client.send(request("HEAD", "/s") + request("GET", "/s"))
        head = client.response("HEAD")
        assert head.status == 200 and head.header("content-length") is None
        got = client.response()
        assert got.status == 200 and got.body == b"abcde"


# 5. Chunked bodies and HTTP/1.0


def test_a_chunked_request_body_reaches_the_app_whole(serve: Serve) -> None:
    served = serve(echo)
    with served.connect() as client:
        client.send(b"POST /c HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n")
        client.send(b"5\r\nhello\r\n")
        client.send(b"1;ext=1\r\n \r\n6\r\nworld!\r\n")
        client.send(b"0\r\n\r\n")
        response = client.response()
        assert response.status == 200 and response.body == b"POST /c hello world!"


def test_a_stream_without_content_length_is_sent_chunked(serve: Serve) -> None:
    served = serve(stream)
    with served.connect() as client:
        client.send(request("GET", "/s"))
        response = client.response()
        assert response.status == 200
        assert response.header("transfer-encoding") == "chunked"
        assert response.header("content-length") is None
        assert response.framed == b"2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n"
        client.send(request("GET", "/s"))
        assert client.response().body == b"abcde"


def test_a_stream_to_an_http_1_0_client_ends_with_the_connection(serve: Serve) -> None:
    served = serve(stream)
    with served.connect() as client:
        client.send(b"GET /s HTTP/1.0\r\nHost: localhost\r\n\r\n")
        response = client.response()
        assert response.status == 200
        assert response.header("transfer-encoding") is None
        assert response.header("content-length") is None
        assert response.header("connection") == "close"
        assert response.body == b"abcde"  # read until the close: no chunk framing
        assert client.eof


# 6. Connection: close


def test_connection_close_from_the_client_closes_after_the_response(serve: Serve) -> None:
    served = serve(echo)
    with served.connect() as client:
        client.send(request("GET", "/bye", b"", "Connection: close"))
        response = client.response()
        assert response.status == 200 and response.body == b"GET /bye "
        assert response.header("connection") == "close"
        assert client.until_close() == b""


# 7. Malformed requests


@pytest.mark.parametrize(
    "garbage",
    [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: localhost\r\nBad Header\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: nope\r\n\r\n",
    ],
)
def test_a_malformed_request_is_answered_400_problem_and_closed(serve: Serve, garbage: bytes) -> None:
    called: list[Scope] = []
    served = serve(recording_echo(called))
    with served.connect() as client:
        client.send(garbage)
        response = client.response()
        assert response.status == 400
        assert response.header("content-type") == "application/problem+json"
        assert response.header("connection") == "close"
        problem = json.loads(response.body)
        assert problem["type"] == "urn:gym-server:problem:malformed-http"
        assert problem["status"] == 400
        assert client.until_close() == b""
    assert called == []


# 8. Failing apps


def assert_internal_error(client: Client) -> None:
    response = client.response()
    assert response.status == 500
    assert response.header("content-type") == "text/plain; charset=utf-8"
    assert response.header("connection") == "close"
    assert response.body == b"Internal Server Error"
    assert client.until_close() == b""


async def raising_before_its_response(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("boom")


async def raising_between_a_sized_head_and_its_body(scope: Scope, receive: Receive, send: Send) -> None:
    headers = [(b"content-length", b"5"), (b"x-app", b"1")]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    raise RuntimeError("boom")


async def returning_without_a_response(scope: Scope, receive: Receive, send: Send) -> None:
    await read_body(receive)


@pytest.mark.parametrize(
    "app",
    [raising_before_its_response, raising_between_a_sized_head_and_its_body, returning_without_a_response],
)
def test_an_app_that_sent_nothing_to_the_socket_yet_gets_500(serve: Serve, app: ASGIApp) -> None:
    """A head of known length is held for its body, so an app failing after it still gets a clean 500."""
    served = serve(app)
    with served.connect() as client:
        client.send(request("GET", "/"))
        assert_internal_error(client)


def test_an_app_raising_mid_stream_closes_without_the_last_chunk(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})
        raise RuntimeError("boom")

    served = serve(app)
    with served.connect() as client:
        client.send(request("GET", "/") + request("GET", "/"))
        head = client.peek_head()
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked\r\n" in head
        assert client.until_close() == head + b"3\r\nabc\r\n"  # no 0 chunk, no second response


# 9. Header injection


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (b"x-note", b"fine\r\nset-cookie: injected=1"),
        (b"x-note: fine\r\nset-cookie", b"injected=1"),
        (b"x-note", b"fine\r\n\r\ninjected"),
        (b"x-note", b"fine\nset-cookie: injected=1"),
    ],
    ids=["crlf-header-in-value", "crlf-header-in-name", "crlf-crlf-in-value", "lf-in-value"],
)
@pytest.mark.parametrize("sized", [True, False], ids=["content-length", "stream"])
def test_a_header_with_a_line_break_gets_500_never_the_injected_header(
    serve: Serve, name: bytes, value: bytes, sized: bool
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(name, value), *([(b"content-length", b"2")] if sized else [])]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    served = serve(app)
    with served.connect() as client:
        client.send(request("GET", "/"))
        response = client.response()
        assert b"injected" not in response.head
        assert response.status == 500 and response.body == b"Internal Server Error"


# 10. Content-Length mismatches


@pytest.mark.parametrize(
    ("length", "bodies", "expect"),
    [
        # Too long in one message: nothing was written yet, so the 500 replaces it.
        (5, [b"hello world"], None),
        # Too long in a later message: the head and first part went, so the connection closes.
        (5, [b"hel", b"lo world"], b"hel"),
        # Too short: the head and the body went, then the connection closes.
        (10, [b"hello"], b"hello"),
    ],
    ids=["longer-at-once", "longer-later", "shorter"],
)
def test_a_body_that_does_not_match_its_content_length_ends_the_connection(
    serve: Serve, length: int, bodies: list[bytes], expect: bytes | None
) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/next":
            await answer(send, b"NEXT")
            return
        headers = [(b"content-length", str(length).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for k, body in enumerate(bodies):
            await send({"type": "http.response.body", "body": body, "more_body": k < len(bodies) - 1})

    served = serve(app)
    with served.connect() as client:
        client.send(request("GET", "/bad") + request("GET", "/next"))
        if expect is None:
            assert_internal_error(client)
            return
        head = client.peek_head()
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and f"content-length: {length}\r\n".encode() in head
        rest = client.until_close()
        assert rest == head + expect, rest  # neither " world" nor the pipelined request's answer


# 11. Large bodies


def test_a_large_request_body_arrives_whole_in_pieces(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body, messages = await read_body(receive)
        await answer(send, f"{hashlib.sha256(body).hexdigest()} {len(body)} {messages}".encode())

    payload = bytes(range(256)) * 4096  # 1 MiB
    served = serve(app)
    with served.connect() as client:
        client.send(request("POST", "/big", payload))
        digest, size, messages = client.response().body.decode().split()
        assert digest == hashlib.sha256(payload).hexdigest() and int(size) == len(payload)
        assert int(messages) > 1  # read as it came, in several `http.request` messages


def test_a_body_the_app_does_not_read_yet_stops_the_server_reading(serve: Serve) -> None:
    """Flow control: past 64 KiB of unread body the server stops reading the socket, so a client cannot
    push an arbitrary body into its memory ahead of the app; the app reading it resumes the flow."""
    may_read = threading.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.to_thread(may_read.wait, WAIT_S)
        body, _ = await read_body(receive)
        await answer(send, str(len(body)).encode())

    size = 64 * 1024 * 1024
    served = serve(app)
    with served.connect() as client:
        client.send(f"POST /big HTTP/1.1\r\nHost: localhost\r\nContent-Length: {size}\r\n\r\n".encode())
        client.sock.setblocking(False)
        sent = 0
        chunk = b"x" * (1 << 20)
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 1.0 and sent < size:  # until the sockets' buffers fill
            try:
                sent += client.sock.send(chunk[: size - sent])
                quiet_since = time.monotonic()
            except BlockingIOError:
                select.select([], [client.sock], [], 0.1)
        # Only what the kernel's buffers hold on both ends (a few MB on loopback) got in, never all 64 MB.
        assert sent < size // 2, f"the server read {sent} bytes of a body its app did not read"
        may_read.set()
        client.sock.settimeout(WAIT_S)
        while sent < size:
            client.sock.sendall(chunk[: size - sent])
            sent += min(len(chunk), size - sent)
        assert client.response().body == str(size).encode()


@pytest.mark.parametrize("streamed", [False, True])
def test_a_large_response_arrives_whole(serve: Serve, streamed: bool) -> None:
    payload = hashlib.sha256(b"seed").digest() * (4 * 1024 * 1024 // 32)  # 4 MiB

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if not streamed:
            await answer(send, payload)
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for start in range(0, len(payload), 100_000):
            await send(
                {"type": "http.response.body", "body": payload[start : start + 100_000], "more_body": True}
            )
        await send({"type": "http.response.body", "body": b""})

    served = serve(app)
    with served.connect() as client:
        client.send(request("GET", "/big"))
        response = client.response()
        assert response.header("transfer-encoding") == ("chunked" if streamed else None)
        assert len(response.body) == len(payload)
        assert hashlib.sha256(response.body).digest() == hashlib.sha256(payload).digest()
        client.send(request("GET", "/big"))
        assert len(client.response().body) == len(payload)


# 12. Client disconnects


def test_a_client_gone_while_the_app_waits_in_receive_gives_http_disconnect(serve: Serve) -> None:
    waiting = threading.Event()
    seen: queue.Queue[Message] = queue.Queue()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body, _ = await read_body(receive)
        assert body == b"hello"
        waiting.set()
        seen.put(await receive())

    served = serve(app)
    client = served.connect()
    client.send(request("POST", "/", b"hello"))
    assert waiting.wait(WAIT_S)
    client.sock.close()
    assert seen.get(timeout=WAIT_S) == {"type": "http.disconnect"}


# 13. Deadlines


def test_the_keep_alive_deadline_closes_an_idle_connection(serve: Serve) -> None:
    served = serve(echo, SHORT)
    with served.connect() as client:
        client.send(request("GET", "/1"))
        assert client.response().body == b"GET /1 "
        client.send(request("GET", "/2"))  # open between requests
        assert client.response().body == b"GET /2 "
        assert client.until_close() == b""


def test_crlfs_while_idle_do_not_extend_the_keep_alive_deadline(serve: Serve) -> None:
    served = serve(echo, SHORT)
    with served.connect() as client:
        client.send(request("GET", "/1"))
        assert client.response().body == b"GET /1 "
        closed = False
        deadline = time.monotonic() + WAIT_S  # keep_alive_s is 1: the CRLFs go on ten times as long
        while not closed and time.monotonic() < deadline:
            try:
                client.send(b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if not client.quiet(0.2):
                closed = client.until_close() == b""
        assert closed, "still open while CRLFs kept coming"


def test_an_app_slower_than_every_deadline_is_still_answered(serve: Serve) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(1.5)  # three head or body deadlines, one and a half keep-alive ones
        await echo(scope, receive, send)

    served = serve(app, SHORT)
    with served.connect() as client:
        client.send(request("POST", "/slow", b"late"))
        response = client.response()
        assert response.status == 200 and response.body == b"POST /slow late"
        client.send(request("POST", "/slow", b"again"))
        assert client.response().body == b"POST /slow again"


# 14. Graceful shutdown


def test_a_request_in_progress_at_shutdown_gets_its_whole_answer(serve: Serve) -> None:
    working = threading.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body, _ = await read_body(receive)
        working.set()
        await asyncio.sleep(0.5)
        await answer(send, b"finished " + body)

    served = serve(app)
    with served.connect() as client:
        client.send(request("POST", "/work", b"job"))
        assert working.wait(WAIT_S)
        served.server.should_exit = True
        response = client.response()
        assert response.status == 200 and response.body == b"finished job"
        assert response.header("connection") == "close"
        assert client.until_close() == b""
    served.thread.join(WAIT_S)
    assert not served.thread.is_alive()


# 15. The ASGI scope


def test_the_scope_names_the_request(serve: Serve) -> None:
    scopes: list[Scope] = []
    served = serve(recording_echo(scopes))
    with served.connect() as client:
        client.send(
            b"GET /a%20b/c%2Fd?x=1&y=%20z HTTP/1.1\r\nHost: example\r\nX-Mixed-Case: Keep Value\r\n\r\n"
        )
        assert client.response().status == 200
        client.send(b"POST /plain HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi")
        assert client.response().body == b"POST /plain hi"
        local = client.sock.getsockname()
    first, second = scopes
    assert first["type"] == "http" and first["scheme"] == "http"
    assert first["asgi"]["version"] == "3.0"
    assert first["method"] == "GET" and first["http_version"] == "1.1"
    assert first["path"] == "/a b/c/d" and first["raw_path"] == b"/a%20b/c%2Fd"
    assert first["query_string"] == b"x=1&y=%20z"
    assert first["root_path"] == ""
    assert first["headers"] == [(b"host", b"example"), (b"x-mixed-case", b"Keep Value")]
    assert first["client"] == ("127.0.0.1", local[1])
    assert first["server"] == ("127.0.0.1", served.port)
    assert second["method"] == "POST" and second["http_version"] == "1.0"
    assert second["path"] == "/plain" and second["raw_path"] == b"/plain" and second["query_string"] == b""
    assert second["headers"] == [(b"content-length", b"2")]
