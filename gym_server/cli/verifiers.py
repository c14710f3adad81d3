"""`gym-server verifiers check`: replay every golden fixture, of every verifier and every environment.

The engine, and what the fixture files hold, is `gym_server.envcheck.golden`; this prints its table.
Every case runs twice and must agree with itself (determinism). The exit status is 1 when any case failed
**or was skipped** (its environment is not installed: the line names it and the extra to install), so CI
can run the command as is and a green run means every case ran. Registered environments without a golden
file are named on a line of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gym_server.envcheck.golden import check_environments, check_verifiers, environment_fixtures, skip_lines
from gym_server.sdk.registry import Registry
from gym_verifiers.golden import FIXTURES_DIR

__all__ = ["app", "check", "load_registry"]

app = typer.Typer(help="Prove the verifiers: replay their golden fixtures.", no_args_is_help=True)
console = Console()


def load_registry() -> Registry:
    """The installed environments (a seam: tests substitute their own)."""
    return Registry.discover()


@app.command()
def check(
    fixtures: Annotated[
        Path, typer.Option(help="Verifier fixture folder.", file_okay=False, exists=True)
    ] = FIXTURES_DIR,
    environments: Annotated[
        Path | None,
        typer.Option(
            help="Check DIR/<env>/fixtures/golden.jsonl instead of every registered environment's own.",
            file_okay=False,
            exists=True,
        ),
    ] = None,
    only: Annotated[str | None, typer.Option(help="Only suites whose name contains this.")] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Only the table, not each failed case.")
    ] = False,
) -> None:
    """Replay the golden fixtures of every verifier and registered environment, plugins included.

    Exits 1 when any case fails or is skipped (its environment is not installed).
    """
    from gym_verifiers.math import close_shared_pool

    registry = load_registry()
    try:
        verifier_suites = [s for s in check_verifiers(fixtures) if not only or only in s.name]
        suites = [*verifier_suites, *check_environments(environments, registry, only=only)]
    finally:
        close_shared_pool()
    table = Table("suite", "kind", "cases", "passed", "failed", "skipped", title="golden fixtures")
    for suite in suites:
        style = "green" if suite.ok and not suite.skipped else "red"
        table.add_row(
            escape(suite.name),
            suite.kind,
            str(suite.cases),
            f"[{style}]{suite.passed}[/{style}]",
            f"[{style}]{suite.failed}[/{style}]" if suite.failed else "0",
            f"[red]{suite.skipped}[/red]" if suite.skipped else "0",
        )
    console.print(table)
    problems = [problem for suite in suites for problem in suite.problems]
    if not quiet:
        for problem in problems:
            console.print(f"[red]FAIL[/red] {escape(problem)}")
    skips = skip_lines(suites, registry)
    for line in skips:
        console.print(f"[red]SKIPPED[/red] {escape(line)}", soft_wrap=True)
    if environments is None and not only:
        uncovered = environment_fixtures(registry)[1]
        if uncovered:
            console.print(f"no golden fixtures (not checked here): {escape(', '.join(uncovered))}")
    passed, failed = sum(s.passed for s in suites), sum(s.failed for s in suites)
    skipped = sum(s.skipped for s in suites)
    console.print(f"golden cases: {passed} passed, {failed} failed, {skipped} skipped")
    if problems or skips:
        raise typer.Exit(1)
