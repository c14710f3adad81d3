"""`/docs` and `/redoc` render in a real headless browser with no internet: their assets come from the
installed fastapi-offline package, served by the gym itself, never from a CDN.

A real `gym-server serve` on loopback, and Debian's Chromium in headless mode with its background
networking off (this machine has no route out, so a CDN script would simply not load and the page would
stay blank: the old behaviour). `--dump-dom` prints the DOM after the page's scripts ran; Swagger UI's
rendered operation list (`opblock` elements naming our routes) only exists when its JavaScript loaded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import ServerProcess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs Chromium (apt-get install chromium; .ci/ensure-services.sh does)"
    ),
]


def rendered_dom(url: str, profile: Path) -> str:
    """The page's DOM after its scripts ran, from headless Chromium with no background networking."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",  # lets the page's scripts fetch /openapi.json and render
        "--dump-dom",
        url,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture
def server(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> ServerProcess:
    started = server_factory(f"sqlite:///{tmp_path / 'gym.db'}")
    started.start()
    return started


def test_swagger_ui_renders_offline(server: ServerProcess, tmp_path: Path) -> None:
    page = httpx.get(f"{server.url}/docs").text
    assert not re.search(r"""(src|href)=["']https?://""", page), "the docs page loads something remote"
    dom = rendered_dom(f"{server.url}/docs", tmp_path / "profile")
    assert 'class="swagger-ui"' in dom
    assert dom.count("opblock-summary-path") >= 10, dom[-3000:]  # the rendered operations
    assert 'data-path="/v1/sessions/{session_id}/step"' in dom


def test_redoc_renders_offline(server: ServerProcess, tmp_path: Path) -> None:
    page = httpx.get(f"{server.url}/redoc").text
    assert not re.search(r"""(src|href)=["']https?://""", page), "the ReDoc page loads something remote"
    dom = rendered_dom(f"{server.url}/redoc", tmp_path / "profile")
    assert "/v1/sessions/{session_id}/step" in dom, dom[-3000:]  # an operation ReDoc rendered
