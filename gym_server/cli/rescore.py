"""`gym-server reverify` and `gym-server audit`: look again at stored trajectories.

`reverify` re-scores every stored trajectory of a run (and/or an environment) with the verifiers
installed now (`gym_server.scoring.rescoring`), keeps each old score beside its new one, and prints what
changed:
per environment, how many were re-scored, changed, went up or down, the mean change, and how many could
not be re-scored (still live, environment or task gone) or came back without signal (a failure class).

`audit` samples stored trajectories of one environment and writes a report to read what earned a high
score (`gym_server.scoring.audit`).

Both read the store's URL from `--database-url`, else from the server's settings, like `gym-server db`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gym_server.cli.db import DatabaseUrlOption, resolve_database_url
from gym_server.core.errors import GymError
from gym_server.core.settings import Settings
from gym_server.scoring.rescoring import EnvSummary, RescoreOutcome, Rescorer, RescoreSummary
from gym_server.sdk.registry import Registry
from gym_server.store.migrate import mask_url
from gym_server.store.writer import TrajectoryStore

__all__ = ["audit", "load_registry", "reverify"]

console = Console()
errors = Console(stderr=True)


def load_registry() -> Registry:
    """The installed environments (a seam: tests substitute a registry with a changed verifier)."""
    return Registry.discover()


def reverify(
    run: Annotated[str | None, typer.Option(help="Re-score this run's trajectories.")] = None,
    env: Annotated[str | None, typer.Option(help="Only this environment's trajectories.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many, newest first.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Replays in flight at once.")] = 4,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Re-score stored trajectories with the current verifiers and print what changed."""
    if run is None and env is None:
        errors.print("[red]give --run and/or --env[/red]: re-scoring the whole store is not done by accident")
        raise typer.Exit(2)
    url = resolve_database_url(database_url)
    try:
        summary = asyncio.run(_reverify(url, run, env, limit, concurrency))
    except GymError as exc:
        errors.print(f"[red]cannot re-score:[/red] {escape(exc.detail)}")
        raise typer.Exit(1) from exc
    _print_summary(summary, run=run, env=env)


async def _reverify(
    url: str, run: str | None, env: str | None, limit: int | None, concurrency: int
) -> RescoreSummary:
    registry = load_registry()
    store = TrajectoryStore(url)
    await store.start()
    try:
        with Progress(
            TextColumn("re-scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[changed]} changed"),
            TimeElapsedColumn(),
            console=errors,
            transient=True,
        ) as progress:
            bar = progress.add_task("rescore", total=None, changed=0)
            changed = 0

            def advance(outcome: RescoreOutcome | None) -> None:
                nonlocal changed
                changed += bool(outcome is not None and outcome.changed)
                progress.update(bar, advance=1, changed=changed)

            rescorer = Rescorer(registry, store, Settings().limits)
            return await rescorer.rescore_many(
                run=run,
                env=env,
                limit=limit,
                concurrency=concurrency,
                on_total=lambda total: progress.update(bar, total=total),
                on_progress=advance,
            )
    finally:
        await store.stop()


def _print_summary(summary: RescoreSummary, *, run: str | None, env: str | None) -> None:
    where = " ".join(part for part in (f"run {run}" if run else "", f"env {env}" if env else "") if part)
    if not summary.total.rescored and not summary.total.skipped:
        console.print(f"No stored trajectories match {escape(where)}.")
        return
    columns = ("env", "re-scored", "changed", "up", "down", "mean Δ", "no signal", "skipped")
    table = Table(*columns, title=f"reverify {where}")
    for name in sorted(summary.by_env):
        table.add_row(escape(name), *_cells(summary.by_env[name]))
    if len(summary.by_env) > 1:
        table.add_section()
        table.add_row("[bold]all[/bold]", *_cells(summary.total))
    console.print(table)
    total = summary.total
    console.print(
        f"{total.changed} of {total.rescored} re-scored trajectories changed "
        f"({total.up} up, {total.down} down); {total.skipped} skipped."
    )
    for rollout_id, reason in summary.skipped[:10]:
        console.print(f"  skipped {escape(rollout_id)}: {escape(reason)}")
    if len(summary.skipped) > 10:
        console.print(f"  ... and {len(summary.skipped) - 10} more skipped")


def _cells(row: EnvSummary) -> list[str]:
    mean = row.mean_delta
    return [
        str(row.rescored),
        str(row.changed),
        str(row.up),
        str(row.down),
        "-" if mean is None else f"{mean:+.4f}",
        str(row.failed),
        str(row.skipped),
    ]


def audit(
    env: Annotated[str, typer.Argument(help="Environment whose stored trajectories to audit.")],
    run: Annotated[str | None, typer.Option(help="Only this run.")] = None,
    n: Annotated[int, typer.Option("--n", min=1, max=100_000, help="How many trajectories to sample.")] = 200,
    out: Annotated[
        Path, typer.Option(help="Report file: .md for Markdown, .html for HTML.", dir_okay=False)
    ] = Path("audit.md"),
    top: Annotated[int, typer.Option(min=0, max=50, help="Transcripts shown at each end.")] = 3,
    seed: Annotated[int, typer.Option(help="Sampling seed (the same seed samples the same rows).")] = 0,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Sample stored trajectories of ENV and write a score-distribution and transcript report."""
    from gym_server.scoring.audit import AuditError, build_audit, write_report

    url = resolve_database_url(database_url)
    try:
        report = asyncio.run(build_audit(url, env, run=run, n=n, top=top, seed=seed))
    except (AuditError, GymError) as exc:
        detail = exc.detail if isinstance(exc, GymError) else str(exc)
        errors.print(f"[red]cannot audit {escape(env)}:[/red] {escape(detail)}")
        raise typer.Exit(1) from exc
    write_report(report, out)
    console.print(
        f"Audited {report.sampled} of {report.available} stored trajectories of {escape(env)} "
        f"from {escape(mask_url(url))}; report written to [bold]{escape(str(out))}[/bold]"
    )
