"""The gateway's own HTTP/1.1 client (gym_server/gateway/upstream.py) against a scripted server on
loopback, under asyncio's loop and uvloop's (the server's): keep-alive reuse, a stream read as it comes,
an answer delimited by the end of its connection, a pooled connection the upstream closed meanwhile,
a read timeout, an unreachable upstream, a request that breaks off, and a header that would split the
request."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import httpx
import pytest
import uvloop

from gym_server.gateway.upstream import Target, UpstreamClient, UpstreamError, UpstreamResponse

Runner = Callable[[Coroutine[Any, Any, None]], None]
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
RUNNERS = [pytest.param(asyncio.run, id="asyncio"), pytest.param(uvloop.run, id="uvloop")]
OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"ok": true}'


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next((int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length")), 0)
    return head + await reader.readexactly(length)


class Server:
    """A loopback server answering each connection with `script`; it counts connections and requests."""

    def __init__(self, script: Script) -> None:
        self.script, self.connections, self.requests = script, 0, list[bytes]()

    async def __aenter__(self) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.script(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


LIMIT = 1 << 20


def client(read_timeout_s: float = 5.0) -> UpstreamClient:
    return UpstreamClient(connect_timeout_s=2.0, read_timeout_s=read_timeout_s)


async def call(
    upstream: UpstreamClient,
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes = b"",
    deadline_s: float = 60.0,
) -> UpstreamResponse:
    """A request to `url` (parsed here as the gateway parses an upstream) within `deadline_s`."""
    deadline = asyncio.get_running_loop().time() + deadline_s
    return await upstream.request(method, Target.of(httpx.URL(url)), headers, body, deadline=deadline)


@pytest.mark.parametrize("run", RUNNERS)
def test_keep_alive_connection_is_reused_and_the_request_goes_whole(run: Runner) -> None:
    server: Server

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            server.requests.append(await read_request(reader))
            writer.write(OK)

    async def main() -> None:
        upstream = client()
        async with server as url:
            for _ in range(3):
                response = await call(
                    upstream, "POST", f"{url}/v1/chat/completions", {"Authorization": "Bearer k"}, b'{"a": 1}'
                )
                assert (response.status, await response.read(LIMIT)) == (200, b'{"ok": true}')
        await upstream.aclose()
        assert server.connections == 1
        assert len(server.requests) == 3
        request = server.requests[0]
        assert request.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert b"\r\nHost: 127.0.0.1:" in request
        assert b"\r\nAuthorization: Bearer k\r\n" in request
        assert request.endswith(b"Content-Length: 8\r\n\r\n" + b'{"a": 1}')

    server = Server(answer)
    run(main())


@pytest.mark.parametrize("run", RUNNERS)
def test_a_chunked_stream_is_read_as_it_comes(run: Runner) -> None:
    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in (b"data: 1\n\n", b"data: 2\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await gate.wait()  # the client must have the first event before the second is sent
        writer.write(b"0\r\n\r\n")
        await read_request(reader)  # the connection was kept: a second request comes on it
        writer.write(OK)

    gate = asyncio.Event()

    async def main() -> None:
        nonlocal gate
        gate = asyncio.Event()
        upstream = client()
        async with Server(stream) as url:
            response = await call(upstream, "POST", f"{url}/v1/chat/completions", {}, b"{}")
            got = []
            async for chunk in response.stream():
                got.append(chunk)
                gate.set()
            assert b"".join(got) == b"data: 1\n\ndata: 2\n\n"
            assert got[0] == b"data: 1\n\n"
            assert await (await call(upstream, "GET", f"{url}/v1/models", {})).read(LIMIT) == b'{"ok": true}'
        await upstream.aclose()

    run(main())


@pytest.mark.parametrize("run", RUNNERS)
def test_an_answer_ended_by_its_connection_is_read_whole_and_not_kept(run: Runner) -> None:
    server: Server

    async def close_delimited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")

    async def main() -> None:
        upstream = client()
        async with server as url:
            for _ in range(2):
                assert await (await call(upstream, "GET", f"{url}/x", {})).read(LIMIT) == b"all of it"
        await upstream.aclose()
        assert server.connections == 2

    server = Server(close_delimited)
    run(main())


@pytest.mark.parametrize("run", RUNNERS)
def test_a_pooled_connection_the_upstream_closed_is_replaced(run: Runner) -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)  # keep-alive promised, then closed: as an idle timeout would

    async def main() -> None:
        upstream = client()
        async with Server(once) as url:
            first = await call(upstream, "POST", f"{url}/v1/chat/completions", {}, b"{}")
            assert await first.read(LIMIT) == b'{"ok": true}'
            await asyncio.sleep(0.05)
            # Whether the close was seen before the reuse or not, the call succeeds on a new connection.
            second = await call(upstream, "POST", f"{url}/v1/chat/completions", {}, b"{}")
            assert (second.status, await second.read(LIMIT)) == (200, b'{"ok": true}')
        await upstream.aclose()

    run(main())


@pytest.mark.parametrize("run", RUNNERS)
def test_a_request_the_upstream_closes_on_unanswered_is_sent_again_once(run: Runner) -> None:
    server: Server

    async def one_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        server.requests.append(await read_request(reader))  # the next one is read, then closed on

    async def main() -> None:
        upstream = client()
        async with server as url:
            for _ in range(2):
                response = await call(upstream, "POST", f"{url}/v1/chat/completions", {}, b"{}")
                assert (response.status, await response.read(LIMIT)) == (200, b'{"ok": true}')
        await upstream.aclose()
        # the second call went on the kept connection, was closed on without a byte, and was sent anew
        assert (server.connections, len(server.requests)) == (2, 1)

    server = Server(one_answer)
    run(main())


@pytest.mark.parametrize("run", RUNNERS)
def test_an_upstream_that_does_not_answer_times_out(run: Runner) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async def main() -> None:
        upstream = client(read_timeout_s=0.2)
        async with Server(silent) as url:
            with pytest.raises(UpstreamError) as caught:
                await call(upstream, "POST", f"{url}/v1/chat/completions", {}, b"{}")
        assert caught.value.timeout and caught.value.kind == "ReadTimeout"
        await upstream.aclose()

    run(main())


@pytest.mark.parametrize("run", RUNNERS)
def test_an_answer_cut_mid_body_and_an_unreachable_upstream_fail(run: Runner) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")

    async def main() -> None:
        upstream = client()
        async with Server(cut) as url:
            response = await call(upstream, "POST", f"{url}/v1/chat/completions", {}, b"{}")
            with pytest.raises(UpstreamError) as caught:
                await response.read(LIMIT)
            assert (caught.value.kind, caught.value.timeout) == ("RemoteProtocolError", False)
            port = int(url.rsplit(":", 1)[1])
        with pytest.raises(UpstreamError) as refused:
            await call(upstream, "GET", f"http://127.0.0.1:{port}/v1/models", {})
        assert (refused.value.kind, refused.value.timeout) == ("ConnectError", False)
        await upstream.aclose()

    run(main())


@pytest.mark.parametrize("value", ["key\r\nX-Injected: 1", "key\n", "ключ"])
def test_a_header_that_would_split_the_request_is_refused_unsent(value: str) -> None:
    async def read_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    server = Server(read_only)

    async def main() -> None:
        upstream = client()
        async with server as url:
            with pytest.raises(UpstreamError) as caught:
                await call(upstream, "POST", f"{url}/v1/chat/completions", {"Authorization": value}, b"{}")
        assert caught.value.kind == "LocalProtocolError"
        assert server.connections == 0  # refused before any connection
        await upstream.aclose()

    asyncio.run(main())


def test_a_call_cancelled_while_waiting_closes_its_connection() -> None:
    server: Server

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # until the client closes
        server.requests.append(b"closed by the client")

    async def main() -> None:
        upstream = client()
        async with server as url:
            pending = asyncio.ensure_future(call(upstream, "POST", f"{url}/v1/chat/completions", {}, b"{}"))
            await asyncio.sleep(0.1)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            for _ in range(100):
                if server.requests:
                    break
                await asyncio.sleep(0.02)
        assert server.requests == [b"closed by the client"]
        await upstream.aclose()

    server = Server(slow)
    asyncio.run(main())
