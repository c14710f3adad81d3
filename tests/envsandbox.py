"""Run an environment's episodes on one named sandbox backend: the fixture parameters and installer.

Environment tests that run code take `BACKENDS` as parameters (marked `bwrap` and `docker`) and wrap the
test in `installed_backend(kind)`, which makes that backend the one `session_sandbox()` and
`sandbox_pool()` use on the running loop, skips the test when the backend cannot run here, and closes
everything afterwards.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from gym_server.core.errors import SandboxUnavailable
from gym_server.sandbox import runtime
from gym_server.sandbox.bubblewrap import BubblewrapBackend
from gym_server.sandbox.docker import DockerBackend
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import SandboxBackend

__all__ = ["BACKENDS", "installed_backend"]

BACKENDS = [
    pytest.param("bubblewrap", marks=pytest.mark.bwrap),
    pytest.param("docker", marks=pytest.mark.docker),
]


@contextlib.asynccontextmanager
async def installed_backend(kind: str) -> AsyncIterator[SandboxBackend]:
    """`kind`'s backend installed on this loop (the test is skipped when it cannot start sandboxes)."""
    name = f"envtest-{uuid.uuid4().hex[:8]}"
    backend: SandboxBackend = (BubblewrapBackend if kind == "bubblewrap" else DockerBackend)(server_name=name)
    try:
        await backend.check()
    except SandboxUnavailable as exc:
        await backend.aclose()
        pytest.skip(f"{kind} backend unavailable: {exc.detail}")
    pool = SandboxPool(backend, size=1)
    runtime.install(backend, pool)
    try:
        yield backend
    finally:
        await runtime.shutdown()
        await pool.aclose()
        await backend.aclose()
