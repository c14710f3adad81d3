"""`gym-server export`: stored trajectories to a JSONL, CSV or Parquet file, for training and analysis.

The file layouts are documented in `gym_server.store.export`. The format follows the output's suffix
(`.jsonl`/`.ndjson`, `.csv`, `.parquet`) unless `--format` says otherwise; any other suffix without
`--format` is refused before anything is written. Rows stream from the database, so exporting a large
run needs no more memory than a small one.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from sqlalchemy.exc import SQLAlchemyError

from gym_server.cli.db import DatabaseUrlOption, fail, resolve_database_url
from gym_server.store.export import (
    UnknownExportFormat,
    count_matching_records,
    export_trajectories,
    format_for,
)
from gym_server.store.migrate import mask_url
from gym_server.store.records import TrajectoryStatus
from gym_server.store.repository import TrajectoryFilter
from gym_server.store.training_sets import NothingToExport, TrainingSet, export_training_set

__all__ = ["ExportFormat", "ExportKind", "export"]

console = Console(stderr=True)  # progress and summary on stderr, so stdout stays clean for scripts


class ExportFormat(StrEnum):
    """File formats `export` writes."""

    JSONL = "jsonl"
    CSV = "csv"
    PARQUET = "parquet"


class ExportKind(StrEnum):
    """What `export` writes: the raw trajectories, or a training set made from them."""

    TRAJECTORIES = "trajectories"
    SFT = "sft"  # the best episode per task: `messages` + `tools`, for TRL's SFTTrainer
    PREFERENCE = "preference"  # chosen/rejected pairs of one task: for TRL's DPOTrainer


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
    kind: Annotated[
        ExportKind, typer.Option(help="Raw trajectories, or an SFT or preference (DPO) training set.")
    ] = ExportKind.TRAJECTORIES,
    policy: Annotated[str | None, typer.Option(help="Only this policy model (training sets).")] = None,
    min_reward: Annotated[float, typer.Option(help="sft: the lowest reward a demonstration may have.")] = 1.0,
    min_margin: Annotated[
        float, typer.Option(min=0.0, help="preference: the smallest reward gap of a pair.")
    ] = 0.5,
    include_evaluation: Annotated[
        bool,
        typer.Option(
            "--include-evaluation",
            help="Also evaluation episodes (metadata.purpose evaluation: the demos' held-out runs, "
            "gym-server eval), left out by default.",
        ),
    ] = False,
) -> None:
    """Export stored trajectories (newest first) to a JSONL, CSV or Parquet file, or an SFT or preference
    training set made from them. Evaluation episodes are left out unless --include-evaluation: held-out
    tasks trained on are held out no more."""
    try:
        fmt = fmt or ExportFormat(format_for(output))
    except UnknownExportFormat as exc:
        raise typer.BadParameter(str(exc), param_hint="OUTPUT") from exc
    url = resolve_database_url(database_url)
    evaluated = None if include_evaluation else False
    if kind is not ExportKind.TRAJECTORIES:
        if fmt is ExportFormat.CSV or status is not None or limit is not None:
            raise typer.BadParameter(
                "a training set is written as jsonl or parquet, from completed trajectories, without --limit",
                param_hint="--kind",
            )
        where = TrajectoryFilter(
            run=run, env=env, task_id=task, tenant=tenant, policy=policy, evaluation=evaluated
        )
        _export_training_set(url, output, kind, fmt, where, min_reward=min_reward, min_margin=min_margin)
        _say_left_out(url, where)
        return
    if policy is not None:
        raise typer.BadParameter(
            "--policy selects a training set's episodes; use it with --kind", param_hint="--policy"
        )
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
                evaluation=evaluated,
                limit=limit,
                progress=lambda n: progress.update(bar, description=f"{n} trajectories written"),
            )
        except SQLAlchemyError as exc:
            raise fail(f"cannot read the trajectory database {mask_url(url)}", exc) from exc
    console.print(
        f"[green]Exported {count} trajectories[/green] as {fmt.value} to [bold]{escape(str(output))}[/bold]"
    )
    _say_left_out(
        url,
        TrajectoryFilter(run=run, env=env, task_id=task, status=status, tenant=tenant, evaluation=evaluated),
    )


def _say_left_out(url: str, where: TrajectoryFilter) -> None:
    """Name how many evaluation episodes the selection held and the export left out (none said when the
    export kept them or there were none)."""
    if where.evaluation is not False:
        return
    try:
        left_out = count_matching_records(url, where.model_copy(update={"evaluation": True}))
    except SQLAlchemyError as exc:
        raise fail(f"cannot read the trajectory database {mask_url(url)}", exc) from exc
    if left_out:
        console.print(
            f"left out {left_out} evaluation episodes (metadata.purpose evaluation); "
            "--include-evaluation keeps them"
        )


def _export_training_set(
    url: str,
    output: Path,
    kind: ExportKind,
    fmt: ExportFormat,
    where: TrajectoryFilter,
    *,
    min_reward: float,
    min_margin: float,
) -> None:
    training_set: TrainingSet = "sft" if kind is ExportKind.SFT else "preference"
    file_format: Literal["jsonl", "parquet"] = "parquet" if fmt is ExportFormat.PARQUET else "jsonl"
    try:
        count = export_training_set(
            url, output, training_set, file_format, min_reward=min_reward, min_margin=min_margin, where=where
        )
    except NothingToExport as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(1) from exc
    except SQLAlchemyError as exc:
        raise fail(f"cannot read the trajectory database {mask_url(url)}", exc) from exc
    what = "examples" if kind is ExportKind.SFT else "pairs"
    console.print(
        f"[green]Exported {count} {kind.value} {what}[/green] as {fmt.value} "
        f"to [bold]{escape(str(output))}[/bold]"
    )
