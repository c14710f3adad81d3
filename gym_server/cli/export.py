"""`gym-server export`: stored trajectories to a JSONL, CSV or Parquet file, for training and analysis.

The file layouts are documented in `gym_server.store.export`. The format follows the output's suffix
(`.jsonl`/`.ndjson`, `.csv`, `.parquet`) unless `--format` says otherwise; any other suffix without
`--format` is refused before anything is written. Rows stream from the database, so exporting a large
run needs no more memory than a small one.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from sqlalchemy.exc import SQLAlchemyError

from gym_server.cli.db import DatabaseUrlOption, fail, resolve_database_url
from gym_server.store.export import UnknownExportFormat, export_trajectories, format_for
from gym_server.store.migrate import mask_url
from gym_server.store.records import TrajectoryStatus

__all__ = ["ExportFormat", "export"]

console = Console(stderr=True)  # progress and summary on stderr, so stdout stays clean for scripts


class ExportFormat(StrEnum):
    """File formats `export` writes."""

    JSONL = "jsonl"
    CSV = "csv"
    PARQUET = "parquet"


def export(
    output: Annotated[
        Path, typer.Argument(help="File to write (overwritten); its folder is created.", dir_okay=False)
    ],
    fmt: Annotated[
        ExportFormat | None,
        typer.Option(
            "--format", "-f", help="Output format (default: from the suffix .jsonl, .csv or .parquet)."
        ),
    ] = None,
    database_url: DatabaseUrlOption = None,
    run: Annotated[str | None, typer.Option(help="Only this run.")] = None,
    env: Annotated[str | None, typer.Option(help="Only this environment.")] = None,
    task: Annotated[str | None, typer.Option(help="Only this task id.")] = None,
    status: Annotated[TrajectoryStatus | None, typer.Option(help="Only trajectories in this state.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's (API keys' tenants).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many, newest first.")] = None,
) -> None:
    """Export stored trajectories (newest first) to a JSONL, CSV or Parquet file."""
    try:
        fmt = fmt or ExportFormat(format_for(output))
    except UnknownExportFormat as exc:
        raise typer.BadParameter(str(exc), param_hint="OUTPUT") from exc
    url = resolve_database_url(database_url)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task(f"exporting from {mask_url(url)}", total=None)
        try:
            count = export_trajectories(
                url,
                output,
                fmt.value,
                run=run,
                env=env,
                task_id=task,
                status=status,
                tenant=tenant,
                limit=limit,
                progress=lambda n: progress.update(bar, description=f"{n} trajectories written"),
            )
        except SQLAlchemyError as exc:
            raise fail(f"cannot read the trajectory database {mask_url(url)}", exc) from exc
    console.print(
        f"[green]Exported {count} trajectories[/green] as {fmt.value} to [bold]{escape(str(output))}[/bold]"
    )
