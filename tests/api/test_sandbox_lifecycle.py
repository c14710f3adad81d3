"""The server's sandbox backend: chosen at start-up from the app's settings, probed by `/readyz`, closed
with nothing left behind at shutdown, and a misconfiguration that stops start-up in seconds (the probe's
own timeout, `PROBE_TIMEOUT_S`, ends the wait on a silent engine; the errors say so).

The Docker and bubblewrap cases run the real engine and the real `bwrap` (markers `docker`, `bwrap`);
the not-ready case puts a loopback proxy between the server and the real engine and then silences it.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import socketserver
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import AppHarness, ServerProcess, serving
from gymtest import call

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox import runtime
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.factory import PROBE_TIMEOUT_S

DOCKER_SOCKET = "/var/run/docker.sock"
# How a silent engine's error reads when the probe's own bound ended the wait (not the Docker SDK's 30 s
# default): the behaviour behind "stops start-up in seconds", without timing the test on a shared machine.
PROBE_WAIT = f"read timeout={PROBE_TIMEOUT_S}"


def sandbox_settings(backend: str, **extra: Any) -> dict[str, Any]:
    return {"server_name": f"lifecycle-{uuid.uuid4().hex[:8]}", "sandbox": {"backend": backend, **extra}}


def docker_containers(server_name: str) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        found = client.api.containers(all=True, filters={"label": f"gym-server.server={server_name}"})
        return [container["Id"][:12] for container in found]
    finally:
        client.close()


def local_leftovers(instance_dir: Path) -> list[str]:
    """What a local backend left: its folder, mounts under it, processes naming it (every bwrap does)."""
    found = [f"folder {instance_dir}"] if instance_dir.exists() else []
    if str(instance_dir) in Path("/proc/self/mounts").read_text():
        found.append(f"mounts under {instance_dir}")
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if str(instance_dir).encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(f"process {entry}")
    return found


async def run_python_in_a_session(gym: AppHarness) -> str:
    """Open a python_repl session, run one cell (a per-session sandbox), and leave the session open."""
    created = await gym.client.post(
        "/v1/sessions", json={"env": "python_repl", "task_id": "python_repl-0000"}
    )
    assert created.status_code == 201, created.text
    session_id = created.json()["session_id"]
    reply = await gym.client.post(
        f"/v1/sessions/{session_id}/step", json={"message": call("run_python", {"code": "print(6 * 7)"})}
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["messages"][0]["content"])


@pytest.mark.parametrize(
    "kind",
    [pytest.param("docker", marks=pytest.mark.docker), pytest.param("bubblewrap", marks=pytest.mark.bwrap)],
)
async def test_the_configured_backend_starts_with_the_server_and_leaves_nothing(
    kind: str, tmp_path: Path
) -> None:
    async with serving(tmp_path, **sandbox_settings(kind, pool_size=1)) as gym:
        backend = await runtime.sandbox_backend()
        assert backend.name == kind
        ready = await gym.client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"] == {"database": "ok", "sandbox": "ok"}
        # The pool fills on first use, not at start-up.
        sandbox = ready.json()["sandbox"]
        admission = sandbox.pop("admission")
        assert sandbox == {"state": "ok", "backend": kind, "pool": {"size": 1, "idle": 0}}
        assert admission["running"] == 0 and admission["max_running"] >= 1
        assert "42" in await run_python_in_a_session(gym)  # a session's own sandbox, left open
        assert (await gym.client.get("/readyz")).json()["sandbox"]["admission"]["running"] == 1
        pool = await runtime.sandbox_pool()
        assert (await pool.run(["python3", "-c", "print(1)"])).stdout == b"1\n"
        assert (await gym.client.get("/readyz")).json()["sandbox"]["pool"]["idle"] >= 1  # warm now
    if kind == "docker":
        assert docker_containers(gym.settings.server_name) == []
    else:
        assert isinstance(backend, BubblewrapBackend)
        assert local_leftovers(backend.instance_dir) == []
    assert (await runtime.health()).state == "not-started"  # the server's runtime is gone from this loop


class EngineProxy(socketserver.ThreadingTCPServer):
    """A loopback TCP front for the Docker socket that can be silenced: it then accepts and never answers.

    It runs on threads of its own, so the proxy keeps answering whatever the server's event loop is doing.
    """

    daemon_threads = True

    def __init__(self, engine_socket: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.engine_socket = engine_socket
        self.silent = threading.Event()
        self.stopped = threading.Event()
        self.port = int(self.server_address[1])

    def __enter__(self) -> EngineProxy:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopped.set()
        self.shutdown()
        self.server_close()


class _Forward(socketserver.BaseRequestHandler):
    server: EngineProxy

    def handle(self) -> None:
        proxy, client = self.server, self.request
        if proxy.silent.is_set():
            proxy.stopped.wait()
            return
        with socket.socket(socket.AF_UNIX) as engine:
            engine.connect(proxy.engine_socket)
            peers = {client: engine, engine: client}
            while not proxy.silent.is_set():
                readable, _, _ = select.select(list(peers), [], [], 0.05)
                for source in readable:
                    data = source.recv(65536)
                    if not data:
                        return
                    peers[source].sendall(data)


@pytest.fixture
def engine_socket() -> str:
    if not os.path.exists(DOCKER_SOCKET):
        pytest.skip(f"no Docker engine at {DOCKER_SOCKET}")
    return DOCKER_SOCKET


@pytest.mark.docker
async def test_readiness_is_503_while_the_docker_engine_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_socket: str
) -> None:
    monkeypatch.setattr(runtime, "_HEALTH_TTL_S", 0.0)
    with EngineProxy(engine_socket) as proxy:
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{proxy.port}")
        async with serving(tmp_path, **sandbox_settings("docker")) as gym:
            assert (await gym.client.get("/readyz")).status_code == 200
            proxy.silent.set()
            down = await gym.client.get("/readyz")
            assert down.status_code == 503
            assert down.headers["content-type"] == "application/problem+json"
            assert down.headers["retry-after"] == "5"
            body = down.json()
            assert body["checks"]["database"] == "ok"
            assert body["checks"]["sandbox"].startswith("docker unavailable: the Docker engine at tcp://")
            assert PROBE_WAIT in body["checks"]["sandbox"]  # the probe's bound ended the wait
            assert "does not answer" in body["detail"] and body["sandbox"]["state"] == "unavailable"
            healthz = await gym.client.get("/healthz")  # liveness never asks the engine
            assert healthz.status_code == 200
            proxy.silent.clear()
            assert (await gym.client.get("/readyz")).status_code == 200  # back once the engine answers


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A loopback port whose kernel completes the handshake and nobody ever answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("kind", ["docker", "bubblewrap"])
async def test_a_backend_that_cannot_run_stops_start_up_before_the_database(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gym_server.sandbox.bubblewrap.shutil.which", lambda *args, **kwargs: None)
    with silent_listener() as port:
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
        with pytest.raises(SandboxUnavailable) as caught:
            async with serving(tmp_path, **sandbox_settings(kind)):
                pass
    detail = caught.value.detail
    assert detail.startswith(f"GYM_SANDBOX__BACKEND={kind} cannot run sandboxes here: ")
    assert ("does not answer (ReadTimeout: " if kind == "docker" else "needs `bwrap`") in detail
    assert (PROBE_WAIT in detail) == (kind == "docker")
    assert not (tmp_path / "gym.db").exists()


def test_the_server_process_refuses_to_start_with_a_clear_message(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    with silent_listener() as port:
        server = server_factory(
            f"sqlite:///{tmp_path / 'gym.db'}",
            GYM_SANDBOX__BACKEND="docker",
            DOCKER_HOST=f"tcp://127.0.0.1:{port}",
        )
        with pytest.raises(RuntimeError, match="server exited") as caught:
            server.start(timeout_s=20)
    assert PROBE_WAIT in str(caught.value)
    assert (
        f"cannot start: GYM_SANDBOX__BACKEND=docker cannot run sandboxes here: the Docker engine at tcp://127.0.0.1:{port}"
        in str(caught.value)
    )


async def test_auto_without_any_backend_still_serves_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setattr("gym_server.sandbox.bubblewrap.shutil.which", lambda *args, **kwargs: None)
    async with serving(tmp_path, **sandbox_settings("auto")) as gym:
        ready = await gym.client.get("/readyz")
        assert ready.status_code == 200, ready.text
        sandbox = ready.json()["sandbox"]
        assert sandbox["state"] == "none" and "no sandbox backend can run code here" in sandbox["detail"]
        with pytest.raises(SandboxUnavailable, match="no sandbox backend"):
            await runtime.sandbox_pool()
        assert "the Python sandbox is unavailable" in await run_python_in_a_session(gym)


async def test_the_apps_settings_choose_the_backend_not_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_SANDBOX__BACKEND", "docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    async with serving(tmp_path, **sandbox_settings("unsafe-no-sandbox")) as gym:
        assert (await runtime.sandbox_backend()).name == "unsafe-no-sandbox"
        ready = (await gym.client.get("/readyz")).json()
        assert ready["sandbox"].pop("admission")["running"] == 0
        assert ready["sandbox"] == {
            "state": "ok",
            "backend": "unsafe-no-sandbox",
            "pool": {"size": 2, "idle": 0},
        }
