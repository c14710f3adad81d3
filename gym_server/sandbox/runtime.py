"""The sandboxes environments use: one backend and one warm pool per event loop, chosen from settings.

Environments call `sandbox_pool()` (stateless verification) or `start_sandbox()` (a per-session
sandbox) without knowing which backend runs them. The server installs its own backend and pool at
start-up with `install()` (so the reaper, the pool size and the server name are its own) and closes
them with `shutdown()`; anything else (a test, the CLI's `play`, a notebook) gets a backend chosen by
`select_backend(get_settings())` on first use. Objects are kept per event loop, because asyncio locks
and pools belong to the loop that made them.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass

from gym_server.sandbox.factory import select_backend
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import Limits, Sandbox, SandboxBackend
from gym_server.settings import get_settings

__all__ = ["install", "sandbox_backend", "sandbox_pool", "shutdown", "start_sandbox"]


@dataclass
class _Runtime:
    backend: SandboxBackend
    pool: SandboxPool
    owned: bool  # made here on first use (closed by `shutdown`), or installed by the server


_runtimes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Runtime] = weakref.WeakKeyDictionary()
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def install(backend: SandboxBackend, pool: SandboxPool) -> None:
    """Make `backend` and `pool` the ones environments on the running loop use (server start-up)."""
    _runtimes[asyncio.get_running_loop()] = _Runtime(backend, pool, owned=False)


async def _runtime() -> _Runtime:
    loop = asyncio.get_running_loop()
    found = _runtimes.get(loop)
    if found is not None:
        return found
    lock = _locks.setdefault(loop, asyncio.Lock())
    async with lock:
        found = _runtimes.get(loop)
        if found is None:
            settings = get_settings()
            backend = await select_backend(settings)
            start_reaper = getattr(backend, "start_reaper", None)  # Docker's timed reaper
            if callable(start_reaper):
                start_reaper()
            pool = SandboxPool(backend, size=settings.sandbox.pool_size)
            found = _runtimes[loop] = _Runtime(backend, pool, owned=True)
        return found


async def sandbox_backend() -> SandboxBackend:
    """The backend of the running loop (chosen and checked on first use).

    Raises:
        SandboxUnavailable: no backend can run code here.
    """
    return (await _runtime()).backend


async def sandbox_pool() -> SandboxPool:
    """The warm pool for stateless runs (verification); it fills itself on first loan."""
    return (await _runtime()).pool


async def start_sandbox(limits: Limits | None = None, *, session_id: str | None = None) -> Sandbox:
    """A new per-session sandbox; the caller closes it (an environment's `close()`)."""
    return await (await sandbox_backend()).start(limits, session_id=session_id)


async def shutdown() -> None:
    """Close the running loop's pool and, when it was made here, its backend."""
    runtime = _runtimes.pop(asyncio.get_running_loop(), None)
    if runtime is not None:
        await runtime.pool.aclose()
        if runtime.owned:
            await runtime.backend.aclose()
