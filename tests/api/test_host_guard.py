"""DNS rebinding and cross-origin state changes: the `Host` and `Origin` checks in front of every transport.

In-process for the HTTP routes (native API, fast paths, /ui, the facades); a real `gym-server serve` for
WebSocket handshakes, which only a real server answers with an HTTP status.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from conftest import ServerProcess, make_settings, serving
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from gym_server.api.host_guard import HostPolicy
from gym_server.scale.upstream import UpstreamPool

EVIL = "attacker.example:8000"
# One request per transport: native reads and writes, the session fast path, the inspector and its
# login form, and the protocol facades (NeMo Gym, OpenEnv HTTP, MCP).
ROUTES: list[tuple[str, str]] = [
    ("GET", "/v1/rollouts"),
    ("GET", "/v1/environments"),
    ("POST", "/v1/sessions"),
    ("POST", "/v1/sessions/0123456789abcdef/step"),
    ("DELETE", "/v1/sessions/0123456789abcdef"),
    ("GET", "/ui"),
    ("POST", "/ui/login"),
    ("POST", "/v1/environments/counter/nemo-gym/seed_session"),
    ("POST", "/v1/environments/counter/openenv/reset"),
    ("POST", "/v1/environments/counter/mcp"),
    ("GET", "/healthz"),
]


def _problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:gym-server:problem:{slug}"
    return body


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_a_foreign_host_is_refused_on_every_route(tmp_path: Path, method: str, path: str) -> None:
    async with serving(tmp_path) as gym:
        answer = await gym.client.request(method, path, headers={"Host": EVIL}, json={})
        body = _problem(answer, 421, "misdirected-request")
        assert "attacker.example" in body["detail"] and "GYM_HTTP__ALLOWED_HOSTS" in body["detail"]
        # the same request under a name the server has answers (whatever the route then says)
        again = await gym.client.request(method, path, headers={"Host": "localhost:8000"}, json={})
        assert again.status_code != 421


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST:1",
        "localhost.:8000",
        "127.0.0.1:8000",
        "127.9.9.9",
        "[::1]:8000",
        "a.localhost",
    ],
)
async def test_loopback_names_pass(tmp_path: Path, host: str) -> None:
    async with serving(tmp_path) as gym:
        assert (await gym.client.get("/v1/rollouts", headers={"Host": host})).status_code == 200


@pytest.mark.parametrize(
    "host",
    ["attacker.example", "127.0.0.1.attacker.example", "localhost.attacker.example", "10.0.0.5", "[::2]"],
)
async def test_names_and_addresses_of_others_are_refused_on_loopback(tmp_path: Path, host: str) -> None:
    async with serving(tmp_path) as gym:
        _problem(await gym.client.get("/v1/rollouts", headers={"Host": host}), 421, "misdirected-request")


async def test_the_operator_list_and_the_wildcard(tmp_path: Path) -> None:
    async with serving(tmp_path, http={"allowed_hosts": ["Gym.Example.org"]}) as gym:
        assert (
            await gym.client.get("/v1/rollouts", headers={"Host": "gym.example.org:443"})
        ).status_code == 200
        assert (await gym.client.get("/v1/rollouts", headers={"Host": "other.example"})).status_code == 421
    async with serving(tmp_path, http={"allowed_hosts": ["*"]}) as gym:
        assert (await gym.client.get("/v1/rollouts", headers={"Host": EVIL})).status_code == 200


def test_a_wildcard_bind_takes_ip_literals_its_host_name_and_the_list() -> None:
    policy = HostPolicy.from_settings(
        make_settings("sqlite://", host="0.0.0.0", http={"allowed_hosts": ["gym-server"]})
    )
    for host in ("10.1.2.3:8000", "[2001:db8::1]:8000", "gym-server:8000", socket.gethostname(), "localhost"):
        assert policy.host_allowed(host.encode()), host
    for host in ("attacker.example:8000", "gym-server.attacker.example", "10.1.2.3.nip.io"):
        assert not policy.host_allowed(host.encode()), host
    bound = HostPolicy.from_settings(make_settings("sqlite://", host="192.168.7.7"))
    assert bound.host_allowed(b"192.168.7.7:8000") and not bound.host_allowed(b"192.168.7.8:8000")


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_a_cross_origin_state_change_is_refused(tmp_path: Path, method: str) -> None:
    async with serving(tmp_path) as gym:
        headers = {"Host": "localhost:8000", "Origin": "http://attacker.example"}
        answer = await gym.client.request(method, "/v1/sessions", headers=headers, json={"env": "counter"})
        _problem(answer, 403, "cross-origin")
        # "null" (a sandboxed frame, a file) is another origin too
        headers["Origin"] = "null"
        _problem(
            await gym.client.request(method, "/v1/sessions", headers=headers, json={}), 403, "cross-origin"
        )


async def test_same_origin_listed_origins_no_origin_and_reads_pass(tmp_path: Path) -> None:
    async with serving(tmp_path, http={"allowed_origins": ["https://dash.example"]}) as gym:
        create = {"env": "counter", "task_id": "counter-0000"}
        for origin in ("http://localhost:8000", "https://localhost:8000", "https://dash.example", None):
            headers = {"Host": "localhost:8000", **({"Origin": origin} if origin else {})}
            answer = await gym.client.post("/v1/sessions", headers=headers, json=create)
            assert answer.status_code == 201, (origin, answer.text)
            await gym.client.delete(
                f"/v1/sessions/{answer.json()['session_id']}", headers={"Host": "localhost"}
            )
        # another port of the same host is another origin
        headers = {"Host": "localhost:8000", "Origin": "http://localhost:3000"}
        _problem(await gym.client.post("/v1/sessions", headers=headers, json=create), 403, "cross-origin")
        # a cross-origin read cannot change anything (and the browser will not show the page its answer)
        headers = {"Host": "localhost:8000", "Origin": "http://attacker.example"}
        assert (await gym.client.get("/v1/rollouts", headers=headers)).status_code == 200


def _ws_refusal(url: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    async def connect() -> tuple[int, dict[str, Any]]:
        try:
            async with websockets.connect(url, open_timeout=10, **kwargs):
                pass
        except InvalidStatus as exc:
            return exc.response.status_code, json.loads(exc.response.body or b"{}")
        raise AssertionError("the handshake was accepted")

    return asyncio.run(connect())


def test_websocket_handshakes_are_checked(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}")
    server.start()
    ws = server.url.replace("http://", "ws://") + "/v1/environments/counter/openenv/ws"
    status, body = _ws_refusal(ws, origin="http://attacker.example")
    assert status == 403 and body["type"] == "urn:gym-server:problem:cross-origin"
    status, body = _ws_refusal(ws, additional_headers={"Host": EVIL})
    assert status == 421 and body["type"] == "urn:gym-server:problem:misdirected-request"

    async def same_origin() -> None:
        async with websockets.connect(ws, origin=Origin(server.url), open_timeout=10) as socket_:
            await socket_.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            assert json.loads(await socket_.recv())["type"] != "error"

    asyncio.run(same_origin())
    # plain HTTP on the real server too
    answer = httpx.post(f"{server.url}/v1/sessions", headers={"Host": EVIL}, json={"env": "counter"})
    _problem(answer, 421, "misdirected-request")
    server.stop()


async def test_the_ray_entry_point_does_not_forward_origin() -> None:
    """The entry point checked Origin against its own host; a replica, asked under its own address,
    would see the browser's same-origin request as cross-origin."""
    seen: list[bytes] = []

    async def replica(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(replica, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    async with listener:
        upstream = UpstreamPool("127.0.0.1", port)
        headers = [(b"host", b"entry:8000"), (b"origin", b"http://entry:8000"), (b"x-other", b"1")]
        answer = await upstream.request("POST", b"/v1/sessions", headers, b"")
        assert answer.status == 200
    head = seen[0].lower()
    assert b"origin:" not in head and b"x-other: 1" in head and f"host: 127.0.0.1:{port}".encode() in head
