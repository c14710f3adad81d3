"""Sandbox egress end to end, on both backends (bubblewrap and Docker): a program inside the sandbox
reaches exactly the allowed loopback server through the proxy variables, and nothing else; a sandbox
without an allow-list has no way out at all. Every endpoint is on 127.0.0.1 of this host."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import pytest
from echoserver import EchoServer

from gym_server.core.egress_policy import EgressPolicy
from gym_server.core.errors import SandboxUnavailable
from gym_server.core.settings import EgressSettings, SandboxSettings, Settings
from gym_server.sandbox import runtime
from gym_server.sandbox.egress.mount import MOUNT, PROXY_PORT
from gym_server.sandbox.protocol import Limits, Sandbox, SandboxBackend

LIMITS = Limits(timeout_s=20.0)

# Prints {"status": ..., "body": ...} for one GET through whatever proxy the environment names.
FETCH = """
import json, sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as reply:
        print(json.dumps({"status": reply.status, "body": reply.read().decode()}))
except urllib.error.HTTPError as exc:
    print(json.dumps({"status": exc.code, "body": exc.read().decode()}))
except OSError as exc:
    print(json.dumps({"status": None, "body": repr(exc)}))
"""

# Connects straight to an address, without the proxy: how the sandbox's own network answers.
DIRECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""

# The proxy's CONNECT method spoken by hand from inside the sandbox, then a request through the tunnel.
TUNNEL = """
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as s:
    s.sendall(f"CONNECT 127.0.0.1:{sys.argv[2]} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
    head = b""
    while not head.endswith(b"\\r\\n\\r\\n"):
        head += s.recv(1)
    print(head.split(b"\\r\\n")[0].decode())
    s.sendall(b"GET /tunnelled HTTP/1.0\\r\\n\\r\\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    print(data.decode())
"""


async def fetch(sandbox: Sandbox, url: str) -> dict[str, object]:
    result = await sandbox.exec(["python3", "-c", FETCH, url])
    assert result.exit_code == 0, result.text("stderr")
    return dict(json.loads(result.text()))


@pytest.fixture
async def allowed_box(
    backend: SandboxBackend, echo_servers: tuple[EchoServer, EchoServer]
) -> AsyncIterator[Sandbox]:
    policy = EgressPolicy.from_entries([f"127.0.0.1:{echo_servers[0].port}"])
    box = await backend.start(LIMITS, session_id="egress-test", egress=policy)
    try:
        yield box
    finally:
        await box.close()


async def test_the_allowed_server_is_reachable_and_nothing_else(
    allowed_box: Sandbox, echo_servers: tuple[EchoServer, EchoServer], caplog: pytest.LogCaptureFixture
) -> None:
    allowed, other = echo_servers
    with caplog.at_level(logging.INFO, logger="gym_server.sandbox.egress.proxy"):
        reply = await fetch(allowed_box, f"http://127.0.0.1:{allowed.port}/hello?x=1")
        assert reply["status"] == 200
        assert str(reply["body"]).startswith("GET /hello?x=1 HTTP/1.1")
        assert allowed.connections == 1

        refused = await fetch(allowed_box, f"http://127.0.0.1:{other.port}/")
        assert refused["status"] == 403 and str(refused["body"]).startswith("egress refused: ")
        assert "not on the allow-list" in str(refused["body"])
        assert other.connections == 0

        again = await fetch(allowed_box, f"http://127.0.0.1:{allowed.port}/again")  # a fresh forwarder
        assert again["status"] == 200
    assert f"session=egress-test 127.0.0.1:{other.port}" in caplog.text
    assert caplog.text.count("sandbox egress allowed: session=egress-test") == 2


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433:{port}/",
        "http://0x7f.1:{port}/",
        "http://0x7f000001:{port}/",
        "http://127.1:{port}/",
        "http://0177.0.0.1:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://[::1]:{port}/",
        "http://localhost:{port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1:{port}/",
        "http://192.168.0.1/",
    ],
)
async def test_odd_forms_names_and_other_addresses_are_refused(
    allowed_box: Sandbox, echo_servers: tuple[EchoServer, EchoServer], url: str
) -> None:
    reply = await fetch(allowed_box, url.format(port=echo_servers[0].port))
    assert reply["status"] == 403 and str(reply["body"]).startswith("egress refused: "), reply
    assert echo_servers[0].connections == 0


async def test_a_listed_name_that_resolves_to_loopback_is_refused(
    backend: SandboxBackend, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    port = echo_servers[0].port
    box = await backend.start(LIMITS, egress=EgressPolicy.from_entries([f"localhost:{port}"]))
    try:
        reply = await fetch(box, f"http://localhost:{port}/")
        assert reply["status"] == 403 and str(reply["body"]).startswith("egress refused: ")
        assert "loopback" in str(reply["body"])
        assert echo_servers[0].connections == 0
    finally:
        await box.close()


# Eight threads fetch 2 MiB each at once through the forwarder, each checking what it got.
PARALLEL = """
import sys, threading, urllib.request
url, ok = sys.argv[1], []
expected = bytes(range(256)) * (2097152 // 256)
def get():
    with urllib.request.urlopen(url, timeout=20) as reply:
        ok.append(reply.read() == expected)
threads = [threading.Thread(target=get) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sum(ok))
"""


async def test_parallel_bulk_transfers_through_the_forwarder(
    allowed_box: Sandbox, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    url = f"http://127.0.0.1:{echo_servers[0].port}/bytes/2097152"
    result = await allowed_box.exec(["python3", "-c", PARALLEL, url])
    assert result.exit_code == 0, result.text("stderr")
    assert result.text().strip() == "8", result.text("stderr")[-2000:]
    assert echo_servers[0].connections == 8
    assert getattr(allowed_box, "egress").counts == {"allowed": 8}  # noqa: B009 - both backends have it


async def test_connect_tunnels_from_inside_the_sandbox(
    allowed_box: Sandbox, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    result = await allowed_box.exec(["python3", "-c", TUNNEL, str(PROXY_PORT), str(echo_servers[0].port)])
    assert result.exit_code == 0, result.text("stderr")
    assert result.text().startswith("HTTP/1.1 200 Connection established")
    assert "GET /tunnelled HTTP/1.0" in result.text()


async def test_the_proxy_is_the_only_way_out(
    allowed_box: Sandbox, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    """The host's loopback server is not reachable directly: the sandbox's loopback is its own."""
    result = await allowed_box.exec(["python3", "-c", DIRECT, "127.0.0.1", str(echo_servers[0].port)])
    assert result.text().strip() == "ConnectionRefusedError"
    interfaces = await allowed_box.exec(["python3", "-c", "import socket; print(socket.if_nameindex())"])
    assert interfaces.text().strip() == "[(1, 'lo')]"
    assert echo_servers[0].connections == 0


async def test_commands_keep_their_output_and_exit_status(allowed_box: Sandbox) -> None:
    result = await allowed_box.exec("echo out; echo err >&2; exit 7")
    assert (result.exit_code, result.stdout, result.stderr) == (7, b"out\n", b"err\n")
    env = await allowed_box.exec(["/bin/sh", "-c", "echo $HTTP_PROXY $https_proxy"], env={"https_proxy": "x"})
    assert env.text().split() == [f"http://127.0.0.1:{PROXY_PORT}", "x"]


async def test_a_spawned_process_reaches_the_allowed_server(
    allowed_box: Sandbox, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    code = FETCH.replace("sys.argv[1]", "input()") + "\nsys.stdout.flush()\n"
    process = await allowed_box.spawn(["python3", "-u", "-c", code])
    try:
        await process.write(f"http://127.0.0.1:{echo_servers[0].port}/spawned\n".encode())
        line = await process.readline(65536, timeout=15)
        reply = json.loads(line)
        assert reply["status"] == 200 and str(reply["body"]).startswith("GET /spawned")
    finally:
        await process.kill()


async def test_without_an_allow_list_there_is_no_egress(
    backend: SandboxBackend, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    box = await backend.start(LIMITS)
    try:
        port = echo_servers[0].port
        assert (await box.exec(["python3", "-c", DIRECT, "127.0.0.1", str(port)])).text().strip() == (
            "ConnectionRefusedError"
        )
        assert (await box.exec(["python3", "-c", DIRECT, "127.0.0.1", str(PROXY_PORT)])).text().strip() == (
            "ConnectionRefusedError"
        )
        reply = await fetch(box, f"http://127.0.0.1:{port}/")
        assert reply["status"] is None
        probe = await box.exec(["/bin/sh", "-c", f'env | grep -ci proxy; test -e "{MOUNT}" && echo mounted'])
        assert probe.text().split() == ["0"]
        assert echo_servers[0].connections == 0
    finally:
        await box.close()


async def test_close_takes_the_proxy_down(
    backend: SandboxBackend, echo_servers: tuple[EchoServer, EchoServer]
) -> None:
    policy = EgressPolicy.from_entries([f"127.0.0.1:{echo_servers[0].port}"])
    box = await backend.start(LIMITS, egress=policy)
    proxy = getattr(box, "egress", None)
    assert proxy is not None and proxy.socket_path.exists()
    folder = proxy.socket_path.parent
    await box.close()
    assert not folder.exists()


@pytest.mark.parametrize(
    "kind",
    [pytest.param("bubblewrap", marks=pytest.mark.bwrap), pytest.param("docker", marks=pytest.mark.docker)],
)
@pytest.mark.parametrize(
    ("operator", "reachable"),
    [
        ({}, True),
        ({"enabled": False}, False),
        ({"allowed": ["pypi.org:443"]}, False),
        ({"allowed": ["127.0.0.1:{port}"]}, True),
    ],
)
async def test_an_environments_session_sandbox_under_the_operators_settings(
    echo_servers: tuple[EchoServer, EchoServer], kind: str, operator: dict[str, object], reachable: bool
) -> None:
    """The path environments take: `session_sandbox(..., egress=Environment.egress)` on the server's
    runtime, with the operator's switch and ceiling applied."""
    port = echo_servers[0].port
    if "allowed" in operator:
        operator = {"allowed": [str(entry).format(port=port) for entry in operator["allowed"]]}  # type: ignore[attr-defined]
    settings = Settings(sandbox=SandboxSettings(backend=kind, pool_size=0, egress=EgressSettings(**operator)))
    try:
        await runtime.start(settings)
    except SandboxUnavailable as exc:
        pytest.skip(f"{kind} backend unavailable: {exc.detail}")
    try:
        lease = await runtime.session_sandbox(LIMITS, session_id="env-session", egress=[f"127.0.0.1:{port}"])
        try:
            reply = await fetch(await lease.get(), f"http://127.0.0.1:{port}/from-env")
        finally:
            await lease.close()
    finally:
        await runtime.shutdown()
    assert (reply["status"] == 200) is reachable, reply
    assert echo_servers[0].connections == (1 if reachable else 0)
