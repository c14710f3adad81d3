"""No log line holds a key, at any level: a real server at debug, spoken to over HTTP and WebSocket."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import websockets
from authtest import KeyMaker, bearer
from conftest import ServerProcess

from gym_server.core.log_redaction import LIBRARY_LOGGERS, RedactingFilter, redact
from gym_trainer.client import GymClient


def _secret(key: str) -> str:
    return key.split("_", 2)[2]


def test_a_debug_server_logs_no_key(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    keys = KeyMaker(url)
    key, unknown = keys.create("acme", "admin"), keys.create("acme", "read")
    keys.revoke(unknown)
    server = server_factory(url, GYM_LOG_LEVEL="debug", GYM_AUTH__MODE="on", GYM_AUTH__REFRESH_S="0.1")
    server.start()
    auth = bearer(key)
    with httpx.Client(base_url=server.url, headers=auth) as client:
        session = client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0000"}).json()
        client.delete(f"/v1/sessions/{session['session_id']}")
        assert client.get("/v1/rollouts", headers=bearer(unknown)).status_code == 401
    with httpx.Client(base_url=server.url) as browser:
        # the inspector's login form carries the key in its body, and its answer sets a cookie
        login = browser.post("/ui/login", data={"key": key}, follow_redirects=False)
        assert login.status_code == 303 and login.cookies
        assert browser.get("/ui/runs", headers={"X-API-Key": key}).status_code == 200

    async def websocket() -> None:
        ws = server.url.replace("http://", "ws://") + "/v1/environments/counter/openenv/ws"
        async with websockets.connect(ws, additional_headers=auth, open_timeout=10) as socket_:
            await socket_.send(json.dumps({"type": "reset", "data": {"task_id": "counter-0000"}}))
            assert json.loads(await socket_.recv())["type"] == "observation"

    asyncio.run(websocket())
    output = server.stop()
    for secret in (_secret(key), _secret(unknown)):
        assert secret not in output
    cookie = next(iter(login.cookies.values()))
    assert cookie not in output
    # the handshake headers were logged (the test would catch a key in them), masked
    assert "authorization: ***" in output.lower()


def test_client_debug_logs_hold_no_key(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    key = KeyMaker(url).create("acme", "episodes")
    server = server_factory(url, GYM_AUTH__MODE="on")
    server.start()

    async def play() -> None:
        async with GymClient(server.url, api_key=key) as gym:
            session = await gym.create_session("counter", task_id="counter-0000")
            await gym.close(session.session_id)

    with caplog.at_level(logging.DEBUG):
        asyncio.run(play())
        logging.getLogger("sqlalchemy.engine.Engine").info("[params] %r", {"authorization": f"Bearer {key}"})
        logging.getLogger("some.library").debug("headers: %s", [(b"authorization", f"Bearer {key}".encode())])
        try:
            raise RuntimeError(f"refused {key}")
        except RuntimeError:
            logging.getLogger("gym_server.x").exception("failed")
    server.stop()
    assert any(record.name.startswith(("httpx", "httpcore")) for record in caplog.records)
    assert _secret(key) not in caplog.text
    assert key.split("_")[1] in caplog.text  # the key's public id stays, to say which key it was


@pytest.mark.parametrize(
    "line",
    [
        "< authorization: Bearer {key}",
        "{{'Authorization': 'Bearer {key}', 'accept': '*/*'}}",
        "[(b'authorization', b'Bearer {key}'), (b'host', b'x')]",
        "Cookie: gym_ui=s3cr3tcookie; other=1",
        "x-api-key={key}",
        "the key {key} was revoked",
        "postgresql+psycopg://gym:s3cr3tpw@postgres:5432/gym",
    ],
)
def test_redact_masks_every_spelling(line: str) -> None:
    key = "gym_0123456789ab_" + "S" * 43
    text = redact(line.format(key=key))
    assert "SSSS" not in text and "s3cr3t" not in text and "***" in text


def test_the_filter_sits_on_the_root_and_the_libraries_loggers() -> None:
    for name in ("", *LIBRARY_LOGGERS):
        assert any(isinstance(f, RedactingFilter) for f in logging.getLogger(name).filters), name
