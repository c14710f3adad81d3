"""`POST /v1/rollouts` calls only the policy endpoints the operator allows (`GYM_ROLLOUT_RUNS__POLICY_URLS`):
anything else is 422 before a connection is made, a redirect is not followed, and the API key goes to
the allowed endpoint only, never into a stored row, a run view or a log line.

Every socket connect of the process is watched; one to a non-loopback address is refused by the watcher
itself, so these tests never reach out, even against code that would."""

from __future__ import annotations

import ipaddress
import logging
import select
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import make_settings
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from gymtest import apoll

from gym_server.app import create_app
from gym_trainer.toolcalls import render_tool_call

KEY = "sk-canary-5f1e0c9a7b"


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every (host, port) a socket of this process connects to; non-loopback ones fail unsent."""
    attempts: list[tuple[str, int]] = []
    connect, lookup = socket.socket.connect, socket.getaddrinfo

    def watched_connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append((str(address[0]), int(address[1])))
            if not _loopback(str(address[0])):
                raise ConnectionRefusedError(f"test: refused to connect to {address[0]}")
        connect(sock, address)

    def watched_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _loopback(host if isinstance(host, str) else host.decode()):
            attempts.append((str(host), 0))
            raise socket.gaierror(f"test: refused to resolve {host}")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", watched_connect)
    monkeypatch.setattr(socket, "getaddrinfo", watched_lookup)
    return attempts


@asynccontextmanager
async def gym_app(tmp_path: Path, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'gym.db'}", **overrides))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


def stored_bytes(tmp_path: Path) -> bytes:
    """The SQLite database as written (main file and WAL), to search for what must never be stored."""
    return b"".join(path.read_bytes() for path in sorted(tmp_path.glob("gym.db*")))


async def finished_run(gym: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    async def fetch() -> dict[str, Any]:
        return dict((await gym.get(f"/v1/rollouts/runs/{run_id}")).json())

    return await apoll(fetch, lambda run: run["status"] != "running", timeout_s=120)


async def stored_row(gym: httpx.AsyncClient, rollout_id: str) -> dict[str, Any]:
    async def fetch() -> dict[str, Any]:
        return dict((await gym.get(f"/v1/rollouts/{rollout_id}")).json())

    return await apoll(fetch, lambda row: row.get("status") not in (None, "live"))


@pytest.mark.parametrize(
    "base_url",
    [
        "http://169.254.169.254/",
        "http://10.0.0.1/v1",
        "http://127.0.0.1:80@169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1",
    ],
)
async def test_a_policy_url_off_the_allow_list_is_refused_before_any_connection(
    tmp_path: Path, connects: list[tuple[str, int]], base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = {
        "env": "counter",
        "task_ids": ["counter-0000"],
        "policy": {"base_url": base_url, "model": "m", "api": "chat", "api_key": KEY, "timeout_s": 2},
    }
    async with gym_app(tmp_path) as gym:
        response = await gym.post("/v1/rollouts", json=body)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["type"] == "urn:gym-server:problem:endpoint-not-allowed"
        assert "GYM_ROLLOUT_RUNS__POLICY_URLS" in problem["detail"] or "credentials" in problem["detail"]
        assert KEY not in response.text
        listed = (await gym.get("/v1/rollouts")).json()
    assert listed["total"] == 0  # no run, no episode
    assert connects == []
    assert KEY not in caplog.text


async def test_an_allowed_loopback_policy_plays_and_its_key_stays_out_of_rows_and_logs(
    tmp_path: Path, fake_vllm: Any, connects: list[tuple[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_vllm.script = [render_tool_call("read", {}), "done"]
    body = {
        "env": "counter",
        "task_ids": ["counter-0000"],
        "policy": {"base_url": f"{fake_vllm.url}/v1", "model": "base", "api_key": KEY},
        "sampling": {"max_tokens": 24},
        "max_turns": 2,
        "wait": True,
    }
    async with gym_app(tmp_path, rollout_runs={"policy_urls": [fake_vllm.url]}) as gym:
        response = await gym.post("/v1/rollouts", json=body)
        assert response.status_code == 200, response.text
        run = response.json()
        assert run["status"] == "completed" and run["summary"]["failures"] == 0
        row = await stored_row(gym, run["rollout_ids"][0])
        assert row["policy"]["model"] == "base" and len(fake_vllm.requests) == 2
        listed = (await gym.get("/v1/rollouts", params={"run": run["run"]})).text
    port = int(fake_vllm.url.rsplit(":", 1)[1])
    assert ("127.0.0.1", port) in connects  # the watcher sees the policy's connections
    assert fake_vllm.authorizations and set(fake_vllm.authorizations) == {f"Bearer {KEY}"}
    for text in (response.text, str(row), listed, caplog.text):
        assert KEY not in text
    assert KEY.encode() not in stored_bytes(tmp_path)


async def test_a_redirect_to_a_port_off_the_allow_list_is_not_followed(
    tmp_path: Path, serve: Any, connects: list[tuple[str, int]]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as trap:
        trap_port = trap.getsockname()[1]
        seen: list[str | None] = []
        redirector = FastAPI()

        @redirector.post("/{path:path}")
        async def redirect(path: str, request: Request) -> Response:
            seen.append(request.headers.get("authorization"))
            return RedirectResponse(f"http://127.0.0.1:{trap_port}/{path}", status_code=307)

        with serve(redirector) as served:
            body = {
                "env": "counter",
                "task_ids": ["counter-0000"],
                "policy": {"base_url": served.url, "model": "m", "api": "chat", "api_key": KEY},
            }
            async with gym_app(tmp_path, rollout_runs={"policy_urls": [served.url]}) as gym:
                accepted = await gym.post("/v1/rollouts", json=body)
                assert accepted.status_code == 202, accepted.text
                run = await finished_run(gym, accepted.json()["run_id"])
                assert run["summary"]["stop_reasons"] == {"policy_error": 1}
                row = await stored_row(gym, run["rollout_ids"][0])
                assert row["failure"] == "policy_error"
        assert seen == [f"Bearer {KEY}"]  # a 3xx is not retried either
        assert select.select([trap], [], [], 0)[0] == []  # nothing knocked at the trap's door
    assert all(port != trap_port for _, port in connects)
