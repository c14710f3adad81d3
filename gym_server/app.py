"""`create_app`: wires settings, registry, store, session manager, routers, the front and lifespan.

Nothing here handles a request; it only assembles the parts. Tests call `create_app(Settings(...))`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from starlette.routing import BaseRoute

from gym_server import __version__
from gym_server.api.body_guard import BodyGuard
from gym_server.api.front import serve_through_front
from gym_server.api.host_guard import HostGuard, HostPolicy
from gym_server.api.routers import (
    environments,
    gateway,
    health,
    policy_runs,
    rollout_runs,
    rollouts,
    sessions,
    verify,
)
from gym_server.api.url_guard import UrlGuard
from gym_server.auth import ui_login
from gym_server.auth.keytable import KeyTable
from gym_server.auth.middleware import AuthGate, AuthGuard
from gym_server.auth.mode import auth_enabled, warn_if_exposed
from gym_server.auth.policy import UI_LOGIN, UI_LOGOUT
from gym_server.auth.quotas import TenantQuotas
from gym_server.auth.ui_sessions import UiSessions
from gym_server.core.asgi import Stage
from gym_server.core.errors import SandboxUnavailable
from gym_server.core.looplag import LoopLagMonitor
from gym_server.core.problems import install_error_handlers
from gym_server.core.settings import Settings, get_settings
from gym_server.gateway.service import Gateways
from gym_server.protocols import mcp as mcp_facade
from gym_server.protocols import openenv as openenv_facade
from gym_server.protocols.nemo_gym import NemoGymRoutes
from gym_server.protocols.openenv import OpenEnvFastPath
from gym_server.sandbox import runtime as sandbox_runtime
from gym_server.sdk.registry import Registry
from gym_server.sessions.manager import SessionManager
from gym_server.sessions.policy_runs import PolicyRuns
from gym_server.sessions.reaper import Reaper
from gym_server.sessions.rollout_runs import RolloutRunBoard
from gym_server.store.writer import TrajectoryStore
from gym_server.ui import mount as mount_inspector
from gym_verifiers import judging

__all__ = ["create_app"]

log = logging.getLogger("gym_server")

_DESCRIPTION = """Sandboxed multi-turn tool environments and verifiers for RL of LLM agents.

Errors are `application/problem+json` (RFC 9457). A model's bad tool call is not an HTTP error: it
comes back as a tool message and the episode goes on."""


def create_app(settings: Settings | None = None, registry: Registry | None = None) -> FastAPI:
    """Build the gym's ASGI app. `registry` defaults to every installed environment."""
    settings = settings or get_settings()
    gate = AuthGate(
        enabled=auth_enabled(settings),
        keys=KeyTable(settings.store.resolved_url(), settings.auth.refresh_s),
        ui_sessions=UiSessions(settings.auth.ui_session_ttl_s),
        quotas=TenantQuotas(settings.auth.quotas, settings.sessions.retry_after_s),
    )

    loop_lag = LoopLagMonitor(warn_s=settings.limits.loop_lag_warn_ms / 1000)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            loop_lag.start()  # first: start-up's own stalls are measured too
            stack.push_async_callback(loop_lag.stop)
            # First, so that a sandbox misconfiguration stops the server before it touches the database.
            try:
                await sandbox_runtime.start(settings)
            except SandboxUnavailable as exc:
                log.error("cannot start: %s", exc.detail)
                raise
            stack.push_async_callback(sandbox_runtime.shutdown)
            await judging.start(settings)
            stack.push_async_callback(judging.shutdown)
            store = TrajectoryStore(
                settings.store.resolved_url(),
                flush_interval_s=settings.store.flush_interval_s,
                batch_size=settings.store.batch_size,
            )
            await store.start()  # migrates the schema, api_keys included
            stack.push_async_callback(store.stop)
            warn_if_exposed(settings)
            if gate.enabled:
                await gate.keys.start()
                stack.push_async_callback(gate.keys.stop)
            lost = await store.mark_lost(settings.server_name)
            if lost:
                log.warning(
                    "marked %d sessions of %r lost: they were live when the server last stopped",
                    lost,
                    settings.server_name,
                )
            manager = SessionManager(app.state.registry, store, settings, quotas=gate.quotas)
            manager.metrics.registry.register(loop_lag)
            reaper = Reaper(manager, settings.sessions.reap_interval_s)
            runs = RolloutRunBoard(
                settings.rollout_runs, settings.sessions.retry_after_s, settings.sessions.max_sessions
            )
            app.state.store, app.state.manager, app.state.rollout_runs = store, manager, runs
            app.state.policy_runs = PolicyRuns(store)
            app.state.gateways = Gateways(manager, settings, app.state.policy_runs)
            stack.push_async_callback(app.state.gateways.aclose)
            reaper.start()
            _build_routes(app.routes)
            # The OpenAPI document (FastAPI builds it at the first GET /openapi.json, ~0.3 s of CPU on the
            # loop, and keeps it): built now, in a thread, so no request pays it.
            await asyncio.to_thread(app.openapi)
            await _warm_catalog(app.state.registry, settings, stack)
            try:
                # MCP sessions end (their tasks cancelled) before the manager records live sessions lost.
                async with mcp_facade.serving(app, manager, settings):
                    yield
            finally:
                await reaper.stop()
                # Cancelled runs close their own sessions (as abandoned) while the manager still runs.
                await runs.aclose()
                # Sessions close their environments, and so their sandboxes, before the backend goes.
                closed = await manager.shutdown()
                if closed:
                    log.warning("server stopping: %d live sessions recorded as lost", closed)

    # /docs and /redoc from assets installed with fastapi-offline (served under /static-offline-docs),
    # not from a CDN: the docs work on a machine without internet, and load nothing from elsewhere.
    app = FastAPIOffline(
        title="gym-server",
        version=__version__,
        description=_DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.auth_gate = gate
    app.state.loop_lag = loop_lag
    app.state.registry = registry if registry is not None else Registry.discover()
    install_error_handlers(app)
    # The facades' routes before the catalog's GET /v1/environments/{env:path}, which would take them
    # (MCP's GET event stream included); OpenEnv's first, as its `.../openenv/mcp` also ends in `/mcp`.
    openenv_facade.mount(app)
    mcp_facade.mount(app)  # /v1/environments/{env:path}/mcp, with the [mcp] extra only
    for module in (
        environments,
        sessions,
        gateway,
        verify,
        rollout_runs,
        rollouts,
        policy_runs,
        health,
        ui_login,
    ):
        app.include_router(module.router)
    mount_inspector(app)  # the rollout inspector's pages at /ui and its assets at /ui/static
    # In front of FastAPI's own layers, which cost more than a fast path's step; in this order.
    stages: list[Stage] = [
        # a request for a host this server is not (DNS rebinding), or a cross-origin state change
        HostGuard(HostPolicy.from_settings(settings)),
        # Nothing after it runs for a request it refuses; with keys off it has nothing to check (the
        # routes read no principal then: `api.deps`).
        *([AuthGuard(gate)] if gate.enabled else []),
        UrlGuard(),  # NUL in the path or query: a 422 before any route hands it to the store
        # A body that is not JSON or over the limit is never read; the /ui login and logout forms are
        # not JSON (the gate guards them).
        BodyGuard(
            settings.limits.max_body_bytes,
            form_paths=frozenset({UI_LOGIN, UI_LOGOUT}),
            refuse=gateway.body_refusal,  # OpenAI's error shape on the gateway's OpenAI routes
        ),
        sessions.SessionFastPath(),  # the native episode first: the hot path of most clients
        gateway.GatewayFastPath(),  # an agent's chat calls (the session fast path leaves their paths)
        OpenEnvFastPath(),  # /v1/environments/{env}/openenv/{reset,step}
        NemoGymRoutes(),  # /v1/environments/{env}/nemo-gym/{route}
    ]
    # A stall of the loop names every request in flight, refused ones included (`loop_lag`).
    return serve_through_front(app, stages, loop_lag)


async def _warm_catalog(registry: Registry, settings: Settings, stack: AsyncExitStack) -> None:
    """Do each environment's first-use work ahead of time, in a thread (never on the event loop), then
    freeze what start-up made.

    First use imports packages and builds datasets: seconds of CPU for reasoning-gym, some of it in C code
    that holds the GIL (a few hundred ms at a time). `background` (the default) lets the server listen
    at once and keeps those stalls to its first seconds; `before_serving` does it all before the server
    listens, so no request ever meets them, at the cost of a slower start. `gc.freeze()` afterwards moves
    the objects start-up made (modules, schemas, datasets: millions once reasoning-gym is imported) out of
    the collector's reach: a full collection scanning them paused every thread, the loop's too, for up
    to a second.
    """
    if settings.catalog_warmup == "before_serving":
        await asyncio.to_thread(_warm_and_freeze, registry, None)
    elif settings.catalog_warmup == "background":
        # A daemon thread, not the loop's executor: stopping the server must not wait for it.
        stop = threading.Event()
        threading.Thread(
            target=_warm_and_freeze, args=(registry, stop), name="catalog-warmup", daemon=True
        ).start()
        stack.callback(stop.set)
    else:
        gc.freeze()


def _warm_and_freeze(registry: Registry, stop: threading.Event | None) -> None:
    registry.warm(stop)
    gc.freeze()


def _build_routes(routes: list[BaseRoute]) -> None:
    """Build now what FastAPI builds at an included router's first request (each route's schemas and
    dependencies: a few hundred ms of CPU), before the server listens rather than on the loop then."""
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)  # fastapi's _IncludedRouter
        if callable(contexts):
            for _ in contexts():
                pass
