"""`gym-server serve`: run the HTTP service under uvicorn (uvloop, and the gym's own HTTP/1.1 protocol with
its deadlines for slow clients, `gym_server.api.http_protocol`).

Sessions live in one process's memory, so `--workers N` does not share a socket the way a stateless
app would (a step could land on a process that never saw its session). Instead it runs N independent
replicas on consecutive ports, each with its own server name, all writing to the same database;
clients spread their sessions over the replicas. See README "Scaling out". The replicas share one
machine, so each gets an equal share of the sandbox cap and budget (`GYM_SANDBOX__*`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated

import typer
import uvicorn
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from gym_server.auth.mode import auth_enabled
from gym_server.core.extras import install_command
from gym_server.core.settings import SandboxSettings, Settings
from gym_server.protocols import mcp as mcp_facade
from gym_server.sandbox.admission import Budget

if TYPE_CHECKING:
    from fastapi import FastAPI

console = Console(stderr=True)
_PR_SET_PDEATHSIG = 1
_M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
_MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's initial value, kept instead of letting it grow
_HEAP_TRIM_INTERVAL_S = 10.0  # how often freed heap pages are handed back (about 1 ms of a thread each)
# Young-generation threshold once the start-up heap is frozen (CPython's default is 700). Requests
# allocate and free their objects in bursts, so a bigger window lets reference counting reclaim most of
# them before the collector looks; the cyclic garbage it holds meanwhile is bounded by it (a few MB).
_GC_GEN0_THRESHOLD = 20_000


def _run_replica(settings: Settings) -> None:
    from gym_server.api.http_protocol import http_protocol
    from gym_server.app import create_app

    _return_large_blocks_to_the_os()

    # Bind before the app starts: its start-up marks this server name's `live` rows lost, and a second
    # server started on a busy port (same host:port, same name) must fail without touching the rows of
    # the server that is running there.
    listener = _bind(settings.host, settings.port)
    app = create_app(settings)
    _freeze_heap_after_startup(app)
    config = uvicorn.Config(
        app,
        loop="uvloop",
        # the gym's HTTP/1.1 protocol: one write per response, deadlines for slow clients, a connection cap
        http=http_protocol(settings.http),
        timeout_keep_alive=settings.http.keep_alive_s,
        log_level=settings.log_level,
        access_log=False,
        # Nothing in the gym reads the client address or scheme, so X-Forwarded-* rewriting (on by
        # default in uvicorn) would be a per-request cost with no effect.
        proxy_headers=False,
        timeout_graceful_shutdown=10,
    )
    with listener:
        uvicorn.Server(config).run(sockets=[listener])


def _return_large_blocks_to_the_os() -> None:
    """Fix glibc's mmap threshold, so a large block freed goes back to the OS at once, and hand back
    the free pages inside its heaps every `_HEAP_TRIM_INTERVAL_S`.

    By default glibc raises the threshold to the size of each mmapped block freed (up to 32 MiB), after
    which megabyte transcripts are carved from the heap and their memory stays with the process when
    their sessions close: measured, 300 sessions of 1 MB left the server 490 MB over its baseline after
    every close, 9 MB with the threshold fixed (docs/benchmarks.md). A large block can still come from
    a heap's free space, and a heap shrinks only from its top: after 150 closed sessions of 1 MB the
    writer thread's heap kept 10-15 MB free but unreturned, which `malloc_trim` gives back (1-1.5 ms of
    this thread when there is something to give back, 0.03 ms when not; it holds each heap's lock
    meanwhile). Linux with glibc only; elsewhere this does nothing.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim.argtypes = [ctypes.c_size_t]

    def trim_forever() -> None:
        while True:
            time.sleep(_HEAP_TRIM_INTERVAL_S)
            trim(0)  # ctypes lets go of the GIL for the call

    threading.Thread(target=trim_forever, name="heap-trim", daemon=True).start()


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or one clear line and exit 1 (the port is taken, say)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        console.print(
            f"[red]cannot listen on {host}:{port}:[/] {exc.strerror or exc} (is another gym-server "
            "running there? its sessions and stored rows are left untouched)"
        )
        raise typer.Exit(1) from None
    listener.set_inheritable(True)
    return listener


def _freeze_heap_after_startup(app: FastAPI) -> None:
    """Move everything alive once the app has started out of the cyclic collector's reach.

    The ~140,000 objects of the imported modules, schemas and engines live as long as the process, yet
    every full (gen-2) collection walked them all: about 100 ms with the event loop stopped, the step
    p99 at 256 clients (docs/decisions.md). Done in the server process only, after the lifespan's
    start-up, so that lazily built objects are frozen too and tests keep the default collector.
    """
    startup = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with startup(app):  # create_app's lifespan yields no state to pass on
            gc.collect()
            gc.freeze()
            gc.set_threshold(_GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
            yield

    app.router.lifespan_context = lifespan


def serve(
    host: Annotated[str | None, typer.Option(help="interface to bind (GYM_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port to bind (GYM_PORT)")] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url", help="SQLAlchemy URL; default SQLite at GYM_STORE__PATH (docs/install.md)"
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(min=1, help="independent replicas on consecutive ports; with --ray the fewest replicas"),
    ] = 1,
    sandbox_backend: Annotated[
        str | None, typer.Option(help="auto, docker, bubblewrap or unsafe-no-sandbox (GYM_SANDBOX__BACKEND)")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning or error")] = None,
    ray: Annotated[
        bool,
        typer.Option("--ray", help="run replicas on a Ray cluster behind one entry point (docs/scale.md)"),
    ] = False,
    ray_address: Annotated[
        str,
        typer.Option(
            help="with --ray: the cluster (auto: RAY_ADDRESS or the local `ray start`; local: start a "
            "one-node cluster here; or HOST:PORT)"
        ),
    ] = "auto",
    max_workers: Annotated[
        int | None, typer.Option(min=1, help="with --ray: the most replicas (default: --workers)")
    ] = None,
    target_sessions: Annotated[
        int, typer.Option(min=1, help="with --ray: live sessions per replica above which one more starts")
    ] = 64,
    replica_cpus: Annotated[float, typer.Option(min=0, help="with --ray: Ray CPUs per replica")] = 1.0,
    replica_resources: Annotated[
        str | None, typer.Option(help='with --ray: custom Ray resources per replica, JSON: {"gym": 1}')
    ] = None,
    direct_sessions: Annotated[
        bool,
        typer.Option(
            help="with --ray: a create's answer names its replica's URL so clients step it directly "
            "(off: every request goes through the entry point, e.g. when replicas sit behind an ingress)"
        ),
    ] = True,
) -> None:
    """Run the gym server."""
    overrides: dict[str, object] = {}
    for key, value in (("host", host), ("port", port), ("log_level", log_level)):
        if value is not None:
            overrides[key] = value
    if database_url is not None:
        overrides["store"] = {"url": database_url}
    if sandbox_backend is not None:
        overrides["sandbox"] = {"backend": sandbox_backend}
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        console.print(f"[red]invalid configuration:[/] {problems}")
        raise typer.Exit(2) from exc
    console.print(
        f"[bold]gym-server[/] on http://{settings.host}:{settings.port}"
        + (
            f" … :{settings.port + workers - 1} ({workers} replicas)"
            if workers > 1 and not ray_address
            else ""
        )
        + f"  store: {_mask(settings.store.resolved_url())}"
    )
    if stray := settings.store.stray_warning():
        console.print(f"[yellow]warning:[/] {escape(stray)}")
    if not ray and (shared := _shared_sqlite_warning(settings.store.resolved_url(), workers)):
        console.print(f"[yellow]warning:[/] {escape(shared)}", soft_wrap=True)  # one line, even if long
    console.print(
        f"API keys: required (auth.mode={settings.auth.mode}; create one with `gym-server keys create`)"
        if auth_enabled(settings)
        else f"API keys: off (auth.mode={settings.auth.mode})",
        markup=False,
    )
    console.print(
        "MCP: each environment at /v1/environments/{env}/mcp (docs/protocols.md)"
        if mcp_facade.available()
        else f"MCP facade off (needs the mcp extra: {install_command('mcp')})",
        markup=False,  # the extra's brackets are not rich markup
    )
    if ray:
        _run_on_ray(
            settings,
            {
                "address": ray_address,
                "min_replicas": workers,
                "max_replicas": max_workers or workers,
                "target_sessions": target_sessions,
                "replica_cpus": replica_cpus,
                "replica_resources": replica_resources or "{}",
                "direct_sessions": direct_sessions,
            },
        )
        return
    if workers == 1:
        _run_replica(settings)
        return
    _run_replicas(settings, workers)


def _shared_sqlite_warning(url: str, workers: int) -> str | None:
    """The one line `--workers N` on a SQLite file prints: what to use instead, since it will not scale.

    SQLite lets one writer in at a time, and every replica commits each create and close (an
    acknowledgement means committed); a replica finding the file locked sleeps in SQLite's busy handler
    and retries, so replicas queue on one lock: 8 replicas on 16 cores reached 0.44 of 8 times one, with a
    close p99 of 825 ms, where a file per replica reached 0.89 (docs/benchmarks.md, "--workers").
    """
    if workers < 2 or not url.startswith("sqlite"):
        return None
    return (
        f"--workers {workers} share one SQLite file, whose writes go one at a time: it will not scale "
        "(docs/benchmarks.md). Use PostgreSQL (--database-url postgresql://...), or one `gym-server serve` "
        "per replica, each with its own --port and SQLite file (--database-url sqlite:///var/gym-N.db)."
    )


def _run_on_ray(settings: Settings, options: dict[str, object]) -> None:
    """`--ray`: replicas as Ray actors behind this process's entry point (gym_server.scale)."""
    if not settings.store.resolved_url().startswith("postgresql"):
        console.print(
            "[red]--ray needs one PostgreSQL for every replica:[/] pass --database-url postgresql://... "
            "(or GYM_STORE__URL); SQLite is for one machine"
        )
        raise typer.Exit(2)
    try:
        from gym_server.scale.launch import serve_on_ray
        from gym_server.scale.settings import RayScaleSettings
    except ImportError as exc:
        console.print(f"[red]--ray needs Ray:[/] {install_command('ray')} ({exc})", markup=False)
        raise typer.Exit(2) from None
    try:
        resources = options.pop("replica_resources")
        scale = RayScaleSettings.model_validate({**options, "replica_resources": json.loads(str(resources))})
    except (ValidationError, ValueError) as exc:
        console.print(f"[red]invalid --ray options:[/] {exc}", markup=False)
        raise typer.Exit(2) from None
    console.print(
        f"Ray: {scale.min_replicas}-{scale.max_replicas} replicas on {scale.address}, one entry point",
        markup=False,
    )
    serve_on_ray(settings, scale)


def _sandbox_share(settings: Settings, workers: int) -> SandboxSettings:
    """Each replica's share of the host's sandbox cap and budget: the replicas run on one machine."""
    budget = Budget.from_settings(settings.sandbox)
    return settings.sandbox.model_copy(
        update={
            "max_running": max(1, budget.max_running // workers),
            "memory_budget_mb": max(1, budget.memory_mb // workers),
            "cpu_budget": budget.cpus / workers,
        }
    )


def _migrate_once(url: str) -> None:
    """Bring the shared database to head before any replica starts, so none of them races another on a
    new schema (each replica's own upgrade then finds it at head); a database that cannot be migrated
    stops `serve` here with one line instead of N replicas failing one by one."""
    from sqlalchemy.exc import SQLAlchemyError

    from gym_server.store.migrate import describe_error, upgrade_database

    try:
        upgrade_database(url)
    except (SQLAlchemyError, OSError) as exc:
        console.print(
            f"cannot migrate the trajectory database {_mask(url)}: {describe_error(exc)}", markup=False
        )
        raise typer.Exit(1) from None


def _run_replicas(settings: Settings, workers: int) -> None:
    """Migrate the database, start the replicas, forward SIGTERM/SIGINT to them, and wait for them all."""
    _migrate_once(settings.store.resolved_url())
    context = multiprocessing.get_context("spawn")
    replicas = []
    sandbox = _sandbox_share(settings, workers)
    for index in range(workers):
        replica = settings.model_copy(
            update={
                "port": settings.port + index,
                "server_name": f"{settings.server_name}-{index}",
                "sandbox": sandbox,
            }
        )
        process = context.Process(
            target=_run_orphan_proof_replica, args=(replica, os.getpid()), name=f"gym-server-{index}"
        )
        process.start()
        replicas.append(process)

    def forward(signum: int, _frame: object) -> None:
        for process in replicas:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for process in replicas:
        process.join()


def _run_orphan_proof_replica(settings: Settings, parent_pid: int) -> None:
    # If the parent dies without forwarding a signal (SIGKILL), the kernel sends this replica SIGTERM,
    # so no replica outlives its parent holding a port. Linux only; elsewhere it is skipped.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:
        return  # the parent died while this replica was still importing, before the signal was armed
    _run_replica(settings)


def _mask(url: str) -> str:
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url
