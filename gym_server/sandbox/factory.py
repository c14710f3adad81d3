"""Choosing the sandbox backend from the settings.

`auto` prefers Docker when an engine answers and holds the sandbox image, else bubblewrap when it can
start a sandbox here; with neither, it fails with a message naming both reasons and how to fix them.
It never falls back to running code unsandboxed: that takes the explicit `unsafe-no-sandbox` setting.
"""

from __future__ import annotations

import logging

from gym_server.errors import SandboxUnavailable
from gym_server.sandbox.protocol import SandboxBackend
from gym_server.settings import SandboxSettings, Settings

__all__ = ["make_backend", "select_backend"]

log = logging.getLogger(__name__)


def make_backend(kind: str, *, image: str, server_name: str) -> SandboxBackend:
    """The backend named `kind` (docker, bubblewrap or unsafe-no-sandbox), not yet checked."""
    if kind == "docker":
        from gym_server.sandbox.docker import DockerBackend

        return DockerBackend(image=image, server_name=server_name)
    if kind == "bubblewrap":
        from gym_server.sandbox.bubblewrap import BubblewrapBackend

        return BubblewrapBackend(server_name=server_name)
    if kind == "unsafe-no-sandbox":
        from gym_server.sandbox.unsafe import UnsafeBackend

        return UnsafeBackend(server_name=server_name)
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
        backend = make_backend(settings.backend, image=settings.image, server_name=name)
        await backend.check()
        return backend
    reasons: list[str] = []
    for kind in ("docker", "bubblewrap"):
        try:
            backend = make_backend(kind, image=settings.image, server_name=name)
        except ImportError as exc:  # the docker SDK is an optional extra
            reasons.append(f"{kind}: {exc}")
            continue
        try:
            await backend.check()
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
