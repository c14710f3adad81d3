"""Shared fixtures: settings on a temporary SQLite file or a throwaway PostgreSQL database, an app
served in-process (with its lifespan), and a real `gym-server serve` process on a loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cputime
import httpx
import psycopg
import pytest
from fastapi import FastAPI
from rich.console import Console, ConsoleDimensions

from gym_server.app import create_app
from gym_server.core.settings import Settings
from gym_server.sdk.registry import Registry


def pytest_addoption(parser: pytest.Parser) -> None:
    cputime.add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    cputime.register(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `heavy` first, the rest in collection order. Under `--dist loadgroup` pytest-xdist
    hands tests out in this order (two to each worker, then one to whichever worker is free), so every
    heavy test starts at once; one that started late ran on alone at the end, single-threaded on one of
    CI's 2 cores (docs/decisions.md, "CI")."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)


POSTGRES_ADMIN = os.environ.get("GYM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session", autouse=True)
def _gym_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The default store (`$GYM_HOME/gym.db`) in a folder of the session's own, never the user's
    ~/.local/share/gym-server: a test that leaves the store to its default cannot touch real data.
    Set in os.environ so the servers and CLIs that tests start inherit it."""
    before = os.environ.get("GYM_HOME")
    os.environ["GYM_HOME"] = str(tmp_path_factory.mktemp("gym-home"))
    yield
    if before is None:
        os.environ.pop("GYM_HOME", None)
    else:
        os.environ["GYM_HOME"] = before


def make_settings(database_url: str, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "server_name": "test-server",
        "store": {"url": database_url, "flush_interval_s": 0.02},
        "sessions": {"reap_interval_s": 0.05},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return Settings(**base)


# Set in os.environ for the whole session, so the servers, CLIs and scripts that tests start inherit them.
SUITE_ENVIRONMENT = {
    # Servers and apps skip the start-up warm-up of every environment: with reasoning-gym installed it
    # costs each server start 3-10 s of CPU, hundreds of starts in the suite. First use still runs off the
    # event loop, which `tests/test_event_loop_guard.py` checks in this mode; a test of the warm-up itself
    # names its mode.
    "GYM_CATALOG_WARMUP": "off",
    # One OpenMP thread for torch in the processes tests start (examples/train_grpo_trl.py, the policy
    # server): the tiny model gains nothing from a second thread, and on CI's 2 shared cores OpenMP's
    # spinning threads cost 10-20x the CPU (docs/decisions.md, "CI"). In-process torch is set to one thread
    # by tests/trainer_adapters/conftest.py, as torch may already be imported here.
    "OMP_NUM_THREADS": "1",
}


@pytest.fixture(scope="session", autouse=True)
def _suite_environment() -> Iterator[None]:
    """SUITE_ENVIRONMENT in os.environ for the session, each variable restored after it."""
    before = {name: os.environ.get(name) for name in SUITE_ENVIRONMENT}
    os.environ.update(SUITE_ENVIRONMENT)
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich consoles 250 columns wide, however early they were made. The CLI modules make theirs at import,
    and a console fixes its width for good when COLUMNS is set at that moment (by whichever test ran
    first in that process), so setting COLUMNS in a later test does not reach it, and a long path (a
    worker's tmp_path under pytest-xdist is longer) would wrap mid-word."""
    monkeypatch.setenv("COLUMNS", "250")
    wide = ConsoleDimensions(250, 25)
    monkeypatch.setattr(Console, "size", property(lambda _console: wide))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, dropped afterwards."""
    name = f"gym_test_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {POSTGRES_ADMIN} is required for postgres tests: {exc}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test using this runs twice: on a SQLite file and on the PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gym.db'}"
    return str(request.getfixturevalue("postgres_url"))


@dataclass
class AppHarness:
    app: FastAPI
    client: httpx.AsyncClient
    settings: Settings


@pytest.fixture
def app_factory(database_url: str) -> Callable[..., Any]:
    """Build an app on the parametrized database with overridden settings; use as an async context."""

    @asynccontextmanager
    async def factory(registry: Registry | None = None, **overrides: Any) -> AsyncIterator[AppHarness]:
        settings = make_settings(database_url, **overrides)
        app = create_app(settings, registry)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                yield AppHarness(app, client, settings)

    return factory


@asynccontextmanager
async def serving(tmp_path: Path, **overrides: Any) -> AsyncIterator[AppHarness]:
    """An app on a SQLite file in `tmp_path` with overridden settings, served in-process with its lifespan."""
    settings = make_settings(f"sqlite:///{tmp_path / 'gym.db'}", **overrides)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield AppHarness(app, client, settings)


@pytest.fixture
async def gym(app_factory: Callable[..., Any]) -> AsyncIterator[AppHarness]:
    async with app_factory() as harness:
        yield harness


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    """A real `gym-server serve` process on loopback."""

    url: str
    env: dict[str, str]
    args: list[str]
    process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 90.0) -> None:
        """Start and wait for /readyz. The deadline only catches a hung start: a start costs about 5 s of
        CPU, and in CI the suite's 4 workers share 2 cores with the stack and interop tests (it was 30 s,
        which a start missed at load average 18)."""
        self.process = subprocess.Popen(
            self.args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.process.stdout.read().decode() if self.process.stdout else ""
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{output}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("server did not become ready")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> str:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            output, _ = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            output, _ = self.process.communicate()
        self.process = None
        return output.decode(errors="replace") if output else ""

    def kill(self) -> str:
        return self.stop(signal.SIGKILL)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def factory(database_url: str, **env: str) -> ServerProcess:
        port = free_port()
        environ = {
            **os.environ,
            "GYM_SERVER_NAME": f"e2e-{port}",
            "GYM_DATABASE_URL": database_url,
            "GYM_STORE__FLUSH_INTERVAL_S": "0.02",
            **env,
        }
        args = [
            sys.executable,
            "-m",
            "gym_server.cli.main",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        server = ServerProcess(url=f"http://127.0.0.1:{port}", env=environ, args=args)
        started.append(server)
        return server

    yield factory
    for server in started:
        if server.process is not None:
            server.kill()
