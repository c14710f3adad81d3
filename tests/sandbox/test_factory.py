"""Choosing a backend from settings, and the `gym-server sandbox` commands."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gym_server.cli.sandbox import app
from gym_server.core.errors import SandboxUnavailable
from gym_server.core.settings import SandboxSettings, Settings
from gym_server.sandbox.factory import make_backend, select_backend


async def test_auto_prefers_docker_then_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = await select_backend(Settings(server_name="factory-test"))
    try:
        assert backend.name in ("docker", "bubblewrap")
        assert getattr(backend, "server_name", "") == "factory-test"
    finally:
        await backend.aclose()
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    fallback = await select_backend(SandboxSettings(backend="auto"), server_name="factory-test")
    try:
        assert fallback.name == "bubblewrap"
    finally:
        await fallback.aclose()


async def test_auto_with_nothing_usable_never_runs_unsandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setattr("shutil.which", lambda *args, **kwargs: None)
    with pytest.raises(SandboxUnavailable) as caught:
        await select_backend(SandboxSettings(backend="auto"))
    detail = caught.value.detail
    assert "docker:" in detail and "bubblewrap:" in detail and "unsafe-no-sandbox" in detail


async def test_explicit_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    unsafe = await select_backend(SandboxSettings(backend="unsafe-no-sandbox"))
    assert unsafe.name == "unsafe-no-sandbox"
    await unsafe.aclose()
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailable, match="does not answer"):
        await select_backend(SandboxSettings(backend="docker"))
    with pytest.raises(ValueError, match="unknown"):
        make_backend("podman", image="x", server_name="y")


def test_cli_status_reports_every_backend() -> None:
    result = CliRunner().invoke(app, ["status", "--json"])
    report = json.loads(result.output)
    assert set(report["backends"]) == {"docker", "bubblewrap"}
    assert result.exit_code == (0 if report["auto"] else 1)
    if report["auto"]:
        assert report["backends"][report["auto"]]["python"].startswith("3.")


def test_cli_build_image_if_missing_is_a_no_op_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    import docker

    try:
        docker.from_env().images.get("gym-sandbox:latest")
    except Exception:
        pytest.skip("no Docker engine with the sandbox image here")
    result = CliRunner().invoke(app, ["build-image", "--if-missing"])
    assert result.exit_code == 0 and "already exists" in result.output
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    broken = CliRunner().invoke(app, ["build-image"])
    assert broken.exit_code == 1


async def test_runtime_gives_environments_a_pool_and_installs_the_servers_own() -> None:
    from gym_server.sandbox import runtime
    from gym_server.sandbox.pool import SandboxPool
    from gym_server.sandbox.unsafe import UnsafeBackend

    pool = await runtime.sandbox_pool()
    assert pool is await runtime.sandbox_pool()  # one per event loop
    assert (await pool.run(["python3", "-c", "print(1)"])).stdout == b"1\n"
    lease = await runtime.session_sandbox(session_id="s-1")
    assert (await (await lease.get()).exec(["python3", "-c", "print(2)"])).stdout == b"2\n"
    await lease.close()
    await runtime.shutdown()
    mine = UnsafeBackend(server_name="runtime-test")
    runtime.install(mine, SandboxPool(mine, size=0))
    assert await runtime.sandbox_backend() is mine
    await runtime.shutdown()
    await mine.aclose()
