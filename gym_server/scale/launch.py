"""`gym-server serve --ray`: connect to the cluster, start the replicas, serve the entry point."""

from __future__ import annotations

import os
import signal

import ray
import uvicorn

from gym_server.api.front import Front
from gym_server.api.host_guard import HostGuard, HostPolicy
from gym_server.api.http_protocol import http_protocol
from gym_server.core.settings import Settings
from gym_server.scale.pool import ReplicaPool
from gym_server.scale.router import EntryPoint
from gym_server.scale.sandbox_host import SandboxHosts
from gym_server.scale.settings import RayScaleSettings


def replica_env(settings: Settings) -> dict[str, str]:
    """The gym's settings as every replica needs them: the caller's `GYM_*` variables, then what the
    command line said (the store, the sandbox backend, the log level), so every node runs the same gym."""
    env = {key: value for key, value in os.environ.items() if key.startswith("GYM_")}
    for key in ("GYM_HOST", "GYM_PORT", "GYM_SERVER_NAME"):
        env.pop(key, None)  # each replica's own
    env["GYM_STORE__URL"] = settings.store.resolved_url()
    env["GYM_SANDBOX__BACKEND"] = settings.sandbox.backend
    env["GYM_LOG_LEVEL"] = settings.log_level
    return env


def serve_on_ray(settings: Settings, scale: RayScaleSettings) -> None:
    """Run until SIGINT/SIGTERM; on the way out every replica is stopped (its live sessions stored lost)."""
    ray.init(
        address=None if scale.address == "local" else scale.address,
        namespace="gym-server",
        include_dashboard=False,
        configure_logging=False,
    )
    try:
        env = replica_env(settings)
        hosts = None
        if settings.sandbox.backend == "ray":  # sandboxes on the nodes that offer `sandbox` slots
            hosts = SandboxHosts(f"{settings.server_name}-sandbox-host", settings.sandbox)
            env["GYM_SANDBOX__RAY_HOSTS"] = hosts.prefix
        pool = ReplicaPool(scale, env, settings.store.resolved_url(), settings.server_name, hosts)
        config = uvicorn.Config(
            # the entry point answers only for its own names, as a replica does (DNS rebinding)
            Front([HostGuard(HostPolicy.from_settings(settings))], EntryPoint(pool)),
            host=settings.host,
            port=settings.port,
            loop="uvloop",
            http=http_protocol(settings.http),  # the replicas' protocol: deadlines, a connection cap
            lifespan="on",
            log_level=settings.log_level,
            access_log=False,
            proxy_headers=False,
            server_header=False,  # the replica's own headers pass through
            date_header=False,
            timeout_keep_alive=settings.http.keep_alive_s,
            timeout_graceful_shutdown=10,
        )
        # uvicorn re-raises the signal that stopped it once it has shut down cleanly; the SIGTERM handler
        # ray.init installed would turn that into exit status 15, so the re-raised one is ignored.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        uvicorn.Server(config).run()
    finally:
        ray.shutdown()
