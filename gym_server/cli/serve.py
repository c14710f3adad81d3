"""`gym-server serve`: run the HTTP service under uvicorn (uvloop + httptools).

Sessions live in one process's memory, so `--workers N` does not share a socket the way a stateless
app would (a step could land on a process that never saw its session). Instead it runs N independent
replicas on consecutive ports, each with its own server name, all writing to the same database;
clients spread their sessions over the replicas. See README "Scaling out".
"""

from __future__ import annotations

import multiprocessing
from typing import Annotated

import typer
import uvicorn
from pydantic import ValidationError
from rich.console import Console

from gym_server.settings import Settings

console = Console(stderr=True)


def _run_replica(settings: Settings) -> None:
    from gym_server.app import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_level=settings.log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
    )


def serve(
    host: Annotated[str | None, typer.Option(help="interface to bind (GYM_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port to bind (GYM_PORT)")] = None,
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL; default SQLite at var/gym.db")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="independent replicas on consecutive ports")] = 1,
    sandbox_backend: Annotated[
        str | None, typer.Option(help="auto, docker, bubblewrap or unsafe-no-sandbox (GYM_SANDBOX__BACKEND)")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning or error")] = None,
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
        + (f" … :{settings.port + workers - 1} ({workers} replicas)" if workers > 1 else "")
        + f"  store: {_mask(settings.store.resolved_url())}"
    )
    if workers == 1:
        _run_replica(settings)
        return
    context = multiprocessing.get_context("spawn")
    replicas = []
    for index in range(workers):
        replica = settings.model_copy(
            update={"port": settings.port + index, "server_name": f"{settings.server_name}-{index}"}
        )
        process = context.Process(target=_run_replica, args=(replica,), name=f"gym-server-{index}")
        process.start()
        replicas.append(process)
    try:
        for process in replicas:
            process.join()
    except KeyboardInterrupt:
        for process in replicas:
            process.terminate()
        for process in replicas:
            process.join(15)


def _mask(url: str) -> str:
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url
