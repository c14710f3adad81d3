"""A real `gym-server serve` process against clients that never finish a request: their connections are
closed by the server within the configured deadlines (`GYM_HTTP__*`), normal clients are served
meanwhile, and connections beyond the cap are answered 503 instead of piling up. Loopback only."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import ServerProcess
from gymtest import call

pytestmark = pytest.mark.slow

HEAD = b"POST /v1/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
# How long the server may take past its deadline to be seen closing (a busy 2-core machine).
GRACE_S = 30.0


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setblocking(False)
    return sock


def read_response(sock: socket.socket) -> bytes:
    """One whole response (it has a Content-Length) from a non-blocking socket."""
    data = b""
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        select.select([sock], [], [], 0.1)
        try:
            data += sock.recv(65536)
        except BlockingIOError:
            continue
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            ),
            None,
        )
        if length is not None and len(body) >= length:
            return data
    raise AssertionError(f"no whole response: {data!r}")


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed the connection (EOF or reset), reading whatever it sent first."""
    while select.select([sock], [], [], 0)[0]:
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except BlockingIOError:
            return False
    return False


def wait_all_closed(sockets: dict[str, socket.socket], timeout_s: float) -> None:
    open_ = dict(sockets)
    deadline = time.monotonic() + timeout_s
    while open_ and time.monotonic() < deadline:
        select.select(list(open_.values()), [], [], 0.2)
        open_ = {name: sock for name, sock in open_.items() if not closed_by_server(sock)}
    assert not open_, f"still open after {timeout_s:.0f} s: {sorted(open_)}"


@pytest.fixture
def slow_server(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> ServerProcess:
    """A server with 2 s deadlines (`server_factory` kills it after the test if it still runs)."""
    server = server_factory(
        f"sqlite:///{tmp_path / 'gym.db'}",
        GYM_HTTP__HEADER_TIMEOUT_S="2",
        GYM_HTTP__BODY_TIMEOUT_S="2",
        GYM_HTTP__KEEP_ALIVE_S="2",
        GYM_SANDBOX__BACKEND="unsafe-no-sandbox",
    )
    server.start()
    return server


def test_half_open_connections_are_closed_while_normal_clients_are_served(slow_server: ServerProcess) -> None:
    stalled: dict[str, socket.socket] = {}
    for k in range(20):  # 60 connections in all, each stuck at a different point of a request
        stalled[f"silent-{k}"] = connect(slow_server.url)
        stalled[f"half-head-{k}"] = connect(slow_server.url)
        stalled[f"half-head-{k}"].sendall(HEAD[:40])
        stalled[f"half-body-{k}"] = connect(slow_server.url)
        stalled[f"half-body-{k}"].sendall(HEAD + b"Content-Length: 100\r\n\r\n" + b'{"env": "co')
    # Between requests: after a whole request and its response, bytes that begin no request.
    for name, tail in (("idle-after-response", b""), ("crlf-after-response", b"\r\n")):
        sock = connect(slow_server.url)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(tail)
        stalled[name] = sock
    try:
        with httpx.Client(base_url=slow_server.url, timeout=30) as client:
            created = client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0000"})
            assert created.status_code == 201, created.text
            sid = created.json()["session_id"]
            assert client.post(f"/v1/sessions/{sid}/step", json={"message": call("read")}).status_code == 200
            assert client.delete(f"/v1/sessions/{sid}").status_code == 204
        wait_all_closed(stalled, 2 + GRACE_S)
        with httpx.Client(base_url=slow_server.url, timeout=30) as client:
            assert client.get("/healthz").status_code == 200
    finally:
        for sock in stalled.values():
            sock.close()
    output = slow_server.stop()
    assert "Traceback" not in output, output[-3000:]


def test_a_connection_beyond_the_cap_is_answered_503_and_closed(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory(
        f"sqlite:///{tmp_path / 'gym.db'}",
        GYM_HTTP__MAX_CONNECTIONS="5",
        GYM_SANDBOX__BACKEND="unsafe-no-sandbox",
    )
    server.start()
    idle = [connect(server.url) for _ in range(5)]
    try:
        # The server accepts them in its own time: the request that finds the cap reached is refused.
        refused = None
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            refused = httpx.get(f"{server.url}/healthz", timeout=30)
            if refused.status_code == 503:
                break
            time.sleep(0.05)
        assert refused is not None and refused.status_code == 503, refused
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["retry-after"] == "1" and refused.headers["connection"] == "close"
        assert refused.json()["type"] == "urn:gym-server:problem:too-many-connections"
    finally:
        for sock in idle:
            sock.close()
    # The idle ones gone, the server answers again.
    deadline = time.monotonic() + GRACE_S
    while httpx.get(f"{server.url}/healthz", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "still refusing after the idle connections closed"
        time.sleep(0.05)
    server.stop()


def test_a_websocket_outlives_the_http_deadlines(slow_server: ServerProcess) -> None:
    """A WebSocket (the OpenEnv facade's session) held open well past the 2 s head deadline still works:
    the deadlines are the HTTP exchange's and end when the connection is upgraded. Before the fix, the
    head deadline armed for the upgrade request closed every WebSocket 2 s (10 s by default) in."""
    from websockets.sync.client import connect as ws_connect

    url = slow_server.url.replace("http://", "ws://") + "/v1/environments/counter/openenv/ws"
    with ws_connect(url, open_timeout=10) as ws:
        ws.send('{"type": "reset", "data": {"task_id": "counter-0000", "seed": 0}}')
        assert '"observation"' in str(ws.recv(timeout=10))
        time.sleep(5)  # two and a half deadlines with nothing sent
        ws.send('{"type": "step", "data": {"type": "call_tool", "tool_name": "read", "arguments": {}}}')
        answer = str(ws.recv(timeout=10))
        assert answer.startswith('{"type":"observation"'), answer
