"""Choosing the sandbox backend from the settings.

`auto` prefers Docker when an engine answers and holds the sandbox image, else bubblewrap when it can
start a sandbox here; with neither, it fails with a message naming both reasons and how to fix them.
It never falls back to running code unsandboxed: that takes the explicit `unsafe-no-sandbox` setting.

`probe(backend)` is the cheap, time-bounded question readiness asks of a running backend: does the
Docker engine answer, can bwrap still make namespaces here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Awaitable
from pathlib import Path

from gym_server.core.errors import SandboxUnavailable
from gym_server.core.settings import SandboxSettings, Settings
from gym_server.sandbox.protocol import SandboxBackend
from gym_server.sandbox.toolbox import check_tools_dir

__all__ = ["PROBE_TIMEOUT_S", "make_backend", "probe", "select_backend"]

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0
# /_ping is unversioned, and naming a version keeps the client from asking the engine for one first
# (a request that would wait out the SDK's default timeout on an engine that accepts but never answers).
_PING_API_VERSION = "1.24"


def make_backend(
    kind: str,
    *,
    image: str,
    server_name: str,
    tools_dir: Path | None = None,
    ray_hosts: str = "gym-sandbox-host",
) -> SandboxBackend:
    """The backend named `kind` (docker, bubblewrap, unsafe-no-sandbox, or ray: leased from the sandbox
    hosts named `ray_hosts`-*, docs/scale.md), not yet checked.

    `tools_dir` (see `toolbox`) is shown read-only in docker and bubblewrap sandboxes; the unsafe runner
    has no mounts of its own and refuses one.

    Raises:
        SandboxUnavailable: `tools_dir` is not a folder, or the backend cannot show it.
    """
    try:
        tools_dir = check_tools_dir(tools_dir)
    except ValueError as exc:
        raise SandboxUnavailable(str(exc)) from None
    if kind == "docker":
        from gym_server.sandbox.docker import DockerBackend

        return DockerBackend(image=image, server_name=server_name, tools_dir=tools_dir)
    if kind == "bubblewrap":
        from gym_server.sandbox.bubblewrap import BubblewrapBackend

        return BubblewrapBackend(server_name=server_name, tools_dir=tools_dir)
    if tools_dir is not None:
        raise SandboxUnavailable(f"the {kind} backend cannot show a tools folder (GYM_SANDBOX__TOOLS_DIR)")
    if kind == "unsafe-no-sandbox":
        from gym_server.sandbox.unsafe import UnsafeBackend

        return UnsafeBackend(server_name=server_name)
    if kind == "ray":
        from gym_server.sandbox.ray_hosts import RayHostsBackend

        return RayHostsBackend(server_name=server_name, hosts=ray_hosts)
    raise ValueError(f"unknown sandbox backend {kind!r}")


async def select_backend(
    settings: Settings | SandboxSettings, *, server_name: str | None = None
) -> SandboxBackend:
    """A checked, ready backend for the configured choice.

    Args:
        settings: the server settings (or just their `sandbox` group).
        server_name: labels this server's sandboxes; defaults to `settings.server_name`, else "gym".

    Raises:
        SandboxUnavailable: the configured backend cannot run, or `auto` found none; the detail says why.
    """
    if isinstance(settings, Settings):
        server_name = server_name or settings.server_name
        settings = settings.sandbox
    name = server_name or "gym"
    if settings.backend != "auto":
        backend = make_backend(
            settings.backend,
            image=settings.image,
            server_name=name,
            tools_dir=settings.tools_dir,
            ray_hosts=settings.ray_hosts,
        )
        try:
            await _check(backend)
        except SandboxUnavailable:
            await backend.aclose()
            raise
        return backend
    reasons: list[str] = []
    for kind in ("docker", "bubblewrap"):
        try:
            backend = make_backend(kind, image=settings.image, server_name=name, tools_dir=settings.tools_dir)
        except ImportError as exc:  # the docker SDK is an optional extra
            reasons.append(f"{kind}: {exc}")
            continue
        try:
            await _check(backend)
        except SandboxUnavailable as exc:
            reasons.append(f"{kind}: {exc.detail}")
            log.info("sandbox backend %s is not usable: %s", kind, exc.detail)
            await backend.aclose()
            continue
        log.info("sandbox backend: %s", kind)
        return backend
    raise SandboxUnavailable(
        "no sandbox backend can run code here (" + "; ".join(reasons) + "). Start a Docker engine and run "
        "`gym-server sandbox build-image`, or install bubblewrap; GYM_SANDBOX__BACKEND=unsafe-no-sandbox "
        "runs code unsandboxed and is for development only."
    )


async def _check(backend: SandboxBackend) -> None:
    if backend.name == "docker":
        # The backend's own check waits out the SDK's 30 s timeout on a silent engine; fail in seconds.
        await probe(backend)
    await backend.check()


async def probe(backend: SandboxBackend, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise `SandboxUnavailable` unless `backend` can still make sandboxes, within about `timeout_s`.

    Docker: the engine named by the environment (`DOCKER_HOST`, as the backend uses) answers `/_ping`.
    Bubblewrap: `bwrap` still creates its namespaces here. Any other backend: its own `check()`.
    """
    if backend.name == "docker":
        await _bounded(asyncio.to_thread(_ping_docker, timeout_s), timeout_s, "the Docker engine")
    elif backend.name == "bubblewrap":
        await _bounded(_run_bwrap(), timeout_s, "bubblewrap")
    else:
        await _bounded(backend.check(), timeout_s, f"the {backend.name} backend")


async def _bounded(work: Awaitable[None], timeout_s: float, what: str) -> None:
    try:
        await asyncio.wait_for(work, timeout_s + 1.0)
    except TimeoutError as exc:
        raise SandboxUnavailable(f"{what} does not answer within {timeout_s:g} s") from exc


def _ping_docker(timeout_s: float) -> None:
    import docker
    from docker.utils import kwargs_from_env

    options = kwargs_from_env()
    where = options.get("base_url") or "the default socket"
    try:
        client = docker.APIClient(**options, version=_PING_API_VERSION, timeout=timeout_s)
        try:
            client.get(f"{client.base_url}/_ping", timeout=timeout_s).raise_for_status()
        finally:
            client.close()
    except Exception as exc:
        raise SandboxUnavailable(
            f"the Docker engine at {where} does not answer ({type(exc).__name__}: {exc})"
        ) from exc


async def _run_bwrap() -> None:
    # --as-pid-1: no init of bwrap's own in the namespace, which would outlive bwrap by a moment and be
    # orphaned to the server (a subreaper once a sandbox ran) with no pid reported to collect it by.
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--as-pid-1"]
    argv += ["--ro-bind", "/", "/"]
    argv += ["--", "/bin/true"]
    if os.geteuid() == 0:
        # As root the backend runs bwrap as an unprivileged uid, which needs unprivileged user
        # namespaces; root's own bwrap would pass even where those are switched off.
        argv[:0] = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    missing = [name for name in ("bwrap", "setpriv") if name in argv and shutil.which(name) is None]
    if missing:
        raise SandboxUnavailable(f"`{missing[0]}` is not installed (any more)")
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await process.communicate()
    finally:
        if process.returncode is None:  # cancelled by the deadline
            process.kill()
            await process.wait()
    if process.returncode != 0:
        text = stderr.decode(errors="replace").strip()[:500]
        raise SandboxUnavailable(f"bubblewrap cannot create a sandbox here: {text}")
