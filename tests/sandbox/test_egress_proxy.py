"""The gym-side egress proxy spoken to directly over its Unix socket (what the in-sandbox forwarder
relays): CONNECT tunnels and plain HTTP to an allowed loopback server, refusals that never reach
the refused server, the connection cap, the /metrics counter, and a teardown that leaves nothing."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from echoserver import EchoServer
from prometheus_client import generate_latest

from gym_server.core.egress_policy import EgressPolicy
from gym_server.sandbox.egress.proxy import EgressProxy
from gym_server.sessions.metrics import SessionMetrics


@pytest.fixture
async def proxy(echo_servers: tuple[EchoServer, EchoServer]) -> AsyncIterator[EgressProxy]:
    allowed, _ = echo_servers
    made = EgressProxy(EgressPolicy.from_entries([f"127.0.0.1:{allowed.port}"]), session_id="s-1")
    await made.start()
    yield made
    await made.aclose()


async def ask(proxy: EgressProxy, head: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
    writer.write(head.encode())
    await writer.drain()
    return reader, writer, await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)


async def test_connect_tunnels_to_the_allowed_server(
    proxy: EgressProxy, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    port = echo_servers[0].port
    reader, writer, head = await ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    writer.write(b"GET /through-the-tunnel HTTP/1.0\r\n\r\n")
    body = await asyncio.wait_for(reader.read(), 5)
    assert b"GET /through-the-tunnel HTTP/1.0" in body
    writer.close()
    assert proxy.counts == {"allowed": 1}


async def test_plain_http_is_sent_in_origin_form_without_proxy_headers(
    proxy: EgressProxy, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    port = echo_servers[0].port
    request = (
        f"GET http://127.0.0.1:{port}/p/a?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nX-Kept: yes\r\n\r\n"
    )
    reader, writer, head = await ask(proxy, request)
    assert head.startswith(b"HTTP/1.0 200")
    body = (await asyncio.wait_for(reader.read(), 5)).decode()
    assert body.startswith("GET /p/a?q=1 HTTP/1.1")
    assert "X-Kept: yes" in body and "Connection: close" in body
    assert "Proxy-" not in body
    writer.close()


@pytest.mark.parametrize(
    "target",
    [
        "CONNECT 127.0.0.1:{other} HTTP/1.1",
        "GET http://127.0.0.1:{other}/ HTTP/1.1",
        "CONNECT localhost:{port} HTTP/1.1",
        "CONNECT 2130706433:{port} HTTP/1.1",
        "CONNECT 0x7f.1:{port} HTTP/1.1",
        "CONNECT [::ffff:127.0.0.1]:{port} HTTP/1.1",
        "CONNECT 169.254.169.254:80 HTTP/1.1",
        "CONNECT 10.0.0.1:{port} HTTP/1.1",
        "GET http://[::1]:{port}/ HTTP/1.1",
    ],
)
async def test_refusals_never_reach_a_server(
    proxy: EgressProxy, echo_servers: tuple[EchoServer, EchoServer], target: str
) -> None:
    allowed, other = echo_servers
    line = target.format(port=allowed.port, other=other.port)
    _, writer, head = await ask(proxy, f"{line}\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403") and b"X-Gym-Egress: refused" in head
    writer.close()
    assert allowed.connections == other.connections == 0
    assert proxy.counts == {"refused": 1}
    assert not proxy.attempts[-1].allowed and proxy.attempts[-1].reason


@pytest.mark.parametrize(
    "request_head",
    [
        "GET https://127.0.0.1/ HTTP/1.1",
        "GET / HTTP/1.1",
        "CONNECT 127.0.0.1 HTTP/1.1",
        "GET http://[::1/ HTTP/1.1",
        "GET http://127.0.0.1:99999/ HTTP/1.1",
        "GET http://user@127.0.0.1/ HTTP/1.1",
        "hello",
        "CONNECT evil\nforged-log-line:80 HTTP/1.1",
        "GET http://127.0.0.1/" + "a" * 20000 + " HTTP/1.1",
    ],
    ids=[
        "https-absolute",
        "origin-form",
        "connect-no-port",
        "bad-ipv6",
        "bad-port",
        "userinfo",
        "junk",
        "control-chars",
        "huge",
    ],
)
async def test_what_is_not_a_proxy_request_gets_400(proxy: EgressProxy, request_head: str) -> None:
    _, writer, head = await ask(proxy, f"{request_head}\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    writer.close()


async def test_an_allowed_destination_that_does_not_answer_gets_502() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # bound, never listening: connections are refused
        made = EgressProxy(EgressPolicy.from_entries([f"127.0.0.1:{closed}"]))
        await made.start()
        try:
            _, writer, head = await ask(made, f"CONNECT 127.0.0.1:{closed} HTTP/1.1\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 502")
            writer.close()
        finally:
            await made.aclose()


async def test_the_operators_connection_cap(echo_servers: tuple[EchoServer, EchoServer]) -> None:
    port = echo_servers[0].port
    policy = EgressPolicy([*EgressPolicy.from_entries([f"127.0.0.1:{port}"]).rules], max_connections=1)
    made = EgressProxy(policy)
    await made.start()
    try:
        _, first, head = await ask(made, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        second_reader, second, head = await ask(made, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 403")
        assert b"over 1 open connections" in await asyncio.wait_for(second_reader.read(), 5)
        second.close()
        first.close()
        await first.wait_closed()
        for _ in range(50):  # the proxy notices the close and frees the slot
            _, third, head = await ask(made, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n")
            third.close()
            if head.startswith(b"HTTP/1.1 200"):
                break
            await asyncio.sleep(0.05)
        assert head.startswith(b"HTTP/1.1 200")
    finally:
        await made.aclose()


async def test_close_cuts_open_tunnels_and_removes_the_socket(
    proxy: EgressProxy, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    reader, writer, head = await ask(proxy, f"CONNECT 127.0.0.1:{echo_servers[0].port} HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    folder = proxy.socket_path.parent
    await proxy.aclose()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert not folder.exists()
    with pytest.raises(OSError):
        await asyncio.open_unix_connection(str(folder / "proxy.sock"))
    writer.close()
    await proxy.aclose()  # idempotent


async def test_attempts_are_counted_for_metrics(
    proxy: EgressProxy, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    def counted(decision: str) -> float:
        text = generate_latest(SessionMetrics().registry).decode()
        line = next(
            line
            for line in text.splitlines()
            if line.startswith(f'gym_sandbox_egress_connections_total{{decision="{decision}"}}')
        )
        return float(line.split()[-1])

    before = counted("refused"), counted("allowed")
    for port in (echo_servers[1].port, echo_servers[0].port):
        _, writer, _ = await ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n")
        writer.close()
    assert (counted("refused"), counted("allowed")) == (before[0] + 1, before[1] + 1)
