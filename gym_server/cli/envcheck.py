"""`gym-server env check NAME`: the quality check of one environment, as a table or as JSON.

Exits 1 when any check fails (warnings and skips do not), 2 when the environment is unknown.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gym_server.cli.envs import load_entry
from gym_server.envcheck import EnvCheckReport, check_environment
from gym_server.sdk.registry import Registry

__all__ = ["app", "check", "render"]

app = typer.Typer(help="Judge an environment before training on it.", no_args_is_help=True)
STYLES = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


@app.callback()
def env() -> None:
    """Judge an environment before training on it."""


@app.command()
def check(
    name: Annotated[str, typer.Argument(help="environment name")],
    tasks: Annotated[int, typer.Option(min=1, max=100, help="tasks sampled per check")] = 4,
    split: Annotated[
        str | None, typer.Option(help="split to sample (default: validation, else train)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the report as JSON instead of a table")
    ] = False,
) -> None:
    """Determinism, golden fixtures, reference solution, reward-hack probes, sandbox limits, reward
    spread of a random policy and throughput; exits 1 when a check fails."""
    entry = load_entry(name)
    report = check_environment(entry, Registry.discover(), tasks=tasks, split=split)
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        render(report, Console())
    if not report.ok:
        raise typer.Exit(1)


def render(report: EnvCheckReport, console: Console) -> None:
    """The report as a rich table, with a one-line verdict under it."""
    splits = ", ".join(f"{split} {count}" for split, count in report.tasks.items())
    title = f"{report.env} · {report.kind} · tools: {', '.join(report.tools) or 'none'} · {splits}"
    table = Table("check", "status", "detail", title=escape(title))
    for result in report.checks:
        style = STYLES[result.status]
        table.add_row(result.name, f"[{style}]{result.status}[/{style}]", escape(result.detail))
    console.print(table)
    verdict = "[green]passed[/green]" if report.ok else "[red]FAILED[/red]"
    console.print(f"{escape(report.env)} {report.version}: {verdict} in {report.seconds:.1f} s")
