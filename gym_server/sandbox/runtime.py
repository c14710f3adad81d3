"""The sandboxes environments use: one backend and one warm pool per event loop, chosen from settings.

Environments call `sandbox_pool()` (stateless verification) or `session_sandbox()` (a per-session
sandbox) without knowing which backend runs them; both pass the runtime's one `Admission`, so sessions
and verification share a single cap on running sandboxes and a single memory and CPU budget. The
server chooses its backend at start-up with `start(settings)`, reports it to readiness with `health()`,
and closes it with `shutdown()`; anything else (a test, the CLI's `play`, a notebook) gets a backend
chosen by `select_backend(get_settings())` on first use, or the one it `install()`ed. Objects are kept
per event loop, because asyncio locks and pools belong to the loop that made them.

The warm pool fills on first use, not at start-up: a server whose environments never run code starts
no sandbox at all, and one that does pays a single cold start before the pool is warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from gym_server.core.egress_policy import EgressPolicy
from gym_server.core.errors import SandboxUnavailable
from gym_server.core.settings import EgressSettings, Settings, get_settings
from gym_server.sandbox.admission import Admission, Ticket
from gym_server.sandbox.egress.declared import sandbox_policy
from gym_server.sandbox.factory import probe, select_backend
from gym_server.sandbox.pool import SandboxPool
from gym_server.sandbox.protocol import Limits, Sandbox, SandboxBackend

__all__ = [
    "SandboxHealth",
    "SessionSandbox",
    "health",
    "install",
    "sandbox_backend",
    "sandbox_pool",
    "session_sandbox",
    "shutdown",
    "start",
]

log = logging.getLogger(__name__)

# Readiness probes arrive from every load balancer and orchestrator; one probe answers them all a while.
_HEALTH_TTL_S = 2.0


@dataclass(frozen=True, slots=True)
class SandboxHealth:
    """What readiness says about sandboxes.

    Attributes:
        ready: False only when a backend was chosen and no longer answers.
        state: `ok`, `unavailable` (the chosen backend stopped answering), `none` (`auto` found no
            backend at start-up: environments that run code fail, naming `detail`) or `not-started`.
        backend: the backend's name, when there is one.
        detail: why it is unavailable or absent.
        pool: the warm pool's `size` and `idle` sandboxes.
        admission: running sandboxes and reserved memory and CPU against the cap and budget, the most
            ever running at once (`peak`), and how many callers wait (`Admission.state()`).
    """

    ready: bool
    state: str
    backend: str | None = None
    detail: str | None = None
    pool: dict[str, int] | None = None
    admission: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        values = {item.name: getattr(self, item.name) for item in fields(self)}
        return {name: value for name, value in values.items() if value is not None and name != "ready"}


@dataclass
class _Runtime:
    backend: SandboxBackend | None
    pool: SandboxPool | None
    admission: Admission
    owned: bool  # made here (closed by `shutdown`), or installed by its caller
    why_none: str = ""  # why `auto` found no backend: the detail every sandbox user then gets
    probe: asyncio.Task[str | None] | None = None  # the last probe: None when the backend answered
    probed_at: float = 0.0
    egress: EgressSettings = field(default_factory=EgressSettings)  # the operator's say over egress


_runtimes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Runtime] = weakref.WeakKeyDictionary()
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


async def _make(settings: Settings) -> _Runtime:
    backend = await select_backend(settings)
    start_reaper = getattr(backend, "start_reaper", None)  # Docker's timed reaper
    if callable(start_reaper):
        start_reaper()
    log.info("sandbox backend: %s (configured: %s)", backend.name, settings.sandbox.backend)
    admission = Admission.from_settings(settings.sandbox)
    pool = SandboxPool(backend, size=settings.sandbox.pool_size, admission=admission)
    return _Runtime(backend, pool, admission, owned=True, egress=settings.sandbox.egress)


async def start(settings: Settings) -> SandboxBackend | None:
    """Choose, check and install the configured backend on the running loop (server start-up).

    Returns the backend, or None when `auto` found none usable: that is not fatal, because most
    environments run no code; those that do then get `SandboxUnavailable` naming the reason.

    Raises:
        SandboxUnavailable: an explicitly configured backend cannot run here. The server should refuse
            to start rather than fail its first episode.
    """
    await shutdown()  # a second start on one loop (tests) replaces the first, leaking nothing
    configured = settings.sandbox.backend
    try:
        runtime = await _make(settings)
    except SandboxUnavailable as exc:
        if configured != "auto":
            raise SandboxUnavailable(
                f"GYM_SANDBOX__BACKEND={configured} cannot run sandboxes here: {exc.detail}"
            ) from None  # the detail names the cause; its traceback would bury the message at start-up
        log.warning("GYM_SANDBOX__BACKEND=auto: environments that run code will fail: %s", exc.detail)
        admission = Admission.from_settings(settings.sandbox)
        runtime = _Runtime(
            None, None, admission, owned=True, why_none=exc.detail, egress=settings.sandbox.egress
        )
    _runtimes[asyncio.get_running_loop()] = runtime
    return runtime.backend


def install(backend: SandboxBackend, pool: SandboxPool) -> None:
    """Make `backend` and `pool` the ones environments on the running loop use; the caller closes them.

    Session sandboxes share the pool's admission, or one from the process's settings if it has none.
    """
    settings = get_settings().sandbox
    admission = pool.admission or Admission.from_settings(settings)
    _runtimes[asyncio.get_running_loop()] = _Runtime(
        backend, pool, admission, owned=False, egress=settings.egress
    )


async def _runtime() -> _Runtime:
    loop = asyncio.get_running_loop()
    found = _runtimes.get(loop)
    if found is not None:
        return found
    lock = _locks.setdefault(loop, asyncio.Lock())
    async with lock:
        found = _runtimes.get(loop)
        if found is None:
            found = _runtimes[loop] = await _make(get_settings())
        return found


async def _ready() -> tuple[SandboxBackend, SandboxPool]:
    runtime = await _runtime()
    if runtime.backend is None or runtime.pool is None:
        raise SandboxUnavailable(runtime.why_none)
    return runtime.backend, runtime.pool


async def sandbox_backend() -> SandboxBackend:
    """The backend of the running loop (chosen and checked on first use outside the server).

    Raises:
        SandboxUnavailable: no backend can run code here.
    """
    return (await _ready())[0]


async def sandbox_pool() -> SandboxPool:
    """The warm pool for stateless runs (verification); it fills itself on first loan."""
    return (await _ready())[1]


class SessionSandbox:
    """A session's own sandbox: admitted when the session starts, started on first use, closed with it.

    Admission comes first so that a server with no room refuses the session when it is created (429),
    not half-way through its episode; the sandbox itself starts only when the episode first needs it,
    so an episode that never runs code costs no start.
    """

    def __init__(
        self, ticket: Ticket, limits: Limits, session_id: str | None, egress: EgressPolicy | None = None
    ) -> None:
        self.ticket = ticket
        self.limits = limits
        self.session_id = session_id
        self.egress = egress
        self.sandbox: Sandbox | None = None
        self._starting = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SessionSandbox(session={self.session_id!r}, started={self.sandbox is not None})"

    async def get(self) -> Sandbox:
        """The sandbox, started on the first call.

        Raises:
            SandboxUnavailable: no backend can run code here, or this one is closed.
        """
        async with self._starting:
            if self.ticket.released:
                raise SandboxUnavailable("this session's sandbox is closed")
            if self.sandbox is None:
                backend = await sandbox_backend()
                self.sandbox = await backend.start(
                    self.limits, session_id=self.session_id, egress=self.egress
                )
            return self.sandbox

    async def close(self) -> None:
        """Close the sandbox if it started, then give its room back (also when the close fails)."""
        try:
            async with self._starting:
                if self.sandbox is not None:
                    await self.sandbox.close()
        finally:
            self.ticket.release()


async def session_sandbox(
    limits: Limits | None = None, *, session_id: str | None = None, egress: Sequence[str] = ()
) -> SessionSandbox:
    """Admit a per-session sandbox (started on first use); the caller closes it (an environment's `close()`).

    `egress` is the environment's allow-list (`host:port` entries, `Environment.egress`): the sandbox
    reaches those through its proxy, within what the operator's settings allow; empty, it stays offline.

    Raises:
        SandboxesBusy: the cap on running sandboxes or their budget is taken (429).
        ValueError: an `egress` entry is not `host:port`.
    """
    chosen = limits or Limits()
    runtime = await _runtime()
    policy = sandbox_policy(egress, runtime.egress)
    ticket = await runtime.admission.admit(chosen)
    return SessionSandbox(ticket, chosen, session_id, policy)


async def health() -> SandboxHealth:
    """The sandbox state for readiness: a fresh probe of the backend at most every couple of seconds.

    Never raises, and never chooses a backend: outside the server nothing is chosen until first use.
    """
    runtime = _runtimes.get(asyncio.get_running_loop())
    if runtime is None:
        return SandboxHealth(ready=True, state="not-started", detail="chosen on first use")
    if runtime.backend is None:
        return SandboxHealth(ready=True, state="none", detail=runtime.why_none)
    now = time.monotonic()
    if runtime.probe is None or (runtime.probe.done() and now - runtime.probed_at > _HEALTH_TTL_S):
        runtime.probed_at = now
        runtime.probe = asyncio.get_running_loop().create_task(
            _problem(runtime.backend), name="gym-sandbox-probe"
        )
    # Shielded: a readiness request that gives up must not cancel the probe other requests wait on.
    problem = await asyncio.shield(runtime.probe)
    pool = None if runtime.pool is None else {"size": runtime.pool.size, "idle": runtime.pool.idle}
    state = "ok" if problem is None else "unavailable"
    admission = runtime.admission.state()
    return SandboxHealth(problem is None, state, runtime.backend.name, problem, pool, admission)


async def _problem(backend: SandboxBackend) -> str | None:
    try:
        await probe(backend)
    except SandboxUnavailable as exc:
        return exc.detail
    except Exception as exc:  # a probe that breaks in an unforeseen way still means "not ready"
        return f"{type(exc).__name__}: {exc}"
    return None


async def shutdown() -> None:
    """Close the running loop's pool and, when it was made here, its backend."""
    runtime = _runtimes.pop(asyncio.get_running_loop(), None)
    if runtime is None:
        return
    if runtime.probe is not None:
        runtime.probe.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runtime.probe
    if runtime.pool is not None:
        await runtime.pool.aclose()
    if runtime.owned and runtime.backend is not None:
        await runtime.backend.aclose()
