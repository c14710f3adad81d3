"""When authentication is on: `auth.mode` and, for `auto`, the bind address; and the warning when it is
explicitly off on an address others can reach. A real `gym-server serve` is bound to this machine's
first non-loopback IPv4 address when it has one (the request still never leaves the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from authtest import KeyMaker, bearer
from conftest import ServerProcess, free_port

from gym_server.auth.mode import auth_enabled, is_loopback
from gym_server.core.settings import Settings


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.2", False),
        ("no-such-host.invalid", False),
    ],
)
def test_loopback_decision(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert auth_enabled(Settings(host=host)) is not loopback  # auto
    assert auth_enabled(Settings(host=host, auth={"mode": "on"})) is True
    assert auth_enabled(Settings(host=host, auth={"mode": "off"})) is False


def non_loopback_address() -> str | None:
    """This machine's first non-loopback IPv4 address, from `ip`, or None."""
    try:
        output = subprocess.run(
            ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in output.stdout.splitlines():
        address = line.split()[3].split("/")[0]
        if not address.startswith("127."):
            return address
    return None


def serve_on(host: str, tmp_path: Path, **env: str) -> ServerProcess:
    port = free_port()
    environ = {
        **os.environ,
        "GYM_SERVER_NAME": f"auth-{port}",
        "GYM_DATABASE_URL": f"sqlite:///{tmp_path / 'gym.db'}",
        **env,
    }
    args = [sys.executable, "-m", "gym_server.cli.main", "serve", "--host", host, "--port", str(port)]
    return ServerProcess(url=f"http://{host}:{port}", env=environ, args=args)


@pytest.mark.slow
def test_a_server_bound_to_a_non_loopback_address_requires_keys_unless_told_not_to(tmp_path: Path) -> None:
    host = non_loopback_address()
    if host is None:
        pytest.skip("this machine has no non-loopback IPv4 address; test_loopback_decision covers the rule")
    server = serve_on(host, tmp_path, GYM_LOG_LEVEL="debug")
    key = KeyMaker(server.env["GYM_DATABASE_URL"]).create("acme", "read")
    server.start()
    try:
        response = httpx.get(f"{server.url}/v1/rollouts")
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        assert httpx.get(f"{server.url}/v1/rollouts", headers=bearer(key)).status_code == 200
        assert httpx.get(f"{server.url}/v1/rollouts", headers=bearer(key[:-1])).status_code == 401
    finally:
        output = server.stop()
    assert "API keys: required (auth.mode=auto" in output and "AUTHENTICATION IS OFF" not in output
    assert key not in output and key.split("_", 2)[2][:-1] not in output  # nor the secret, whole or cut

    opened = serve_on(host, tmp_path / "off", GYM_AUTH__MODE="off")
    opened.start()
    try:
        assert httpx.get(f"{opened.url}/v1/rollouts").status_code == 200
    finally:
        output = opened.stop()
    assert f"AUTHENTICATION IS OFF on {host}" in output and "API keys: off (auth.mode=off)" in output
