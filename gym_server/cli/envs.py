"""`gym-server envs list|show` and `gym-server tasks ENV`: the catalog in the terminal."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from gym_server.core.errors import GymError
from gym_server.sdk.registry import EnvironmentEntry, Registry

app = typer.Typer(help="Browse the installed environments.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)


def load_entry(name: str) -> EnvironmentEntry:
    try:
        return Registry.discover().get(name)
    except GymError as exc:
        errors.print(f"[red]error:[/] {escape(exc.detail)}", soft_wrap=True)
        raise typer.Exit(2) from exc


@app.command("list")
def list_envs() -> None:
    """List environments with their kind, version, tools and dataset splits."""
    table = Table("name", "kind", "version", "tools", "splits", "description", title="environments")
    for entry in Registry.discover():
        splits = ", ".join(f"{name} {count}" for name, count in entry.dataset.split_sizes().items()) or "-"
        kind = "multi-turn" if entry.cls.multi_turn else "single-turn"
        table.add_row(
            entry.name,
            kind,
            entry.version,
            str(len(entry.cls.catalog_tools())),
            splits,
            entry.cls.description,
        )
    console.print(table)


@app.command("show")
def show_env(name: Annotated[str, typer.Argument(help="environment name")]) -> None:
    """Show one environment: description, versions, datasets and tool schemas."""
    entry = load_entry(name)
    console.print(f"[bold]{entry.name}[/]  version {entry.version}  verifier {entry.verifier_version}")
    console.print(entry.cls.description)
    console.print(
        f"max turns: {entry.cls.max_turns or 'server limit'}; splits: {entry.dataset.split_sizes()}"
    )
    for schema in entry.cls.catalog_tools():
        console.print(Syntax(orjson.dumps(schema, option=orjson.OPT_INDENT_2).decode(), "json"))


def tasks(
    env: Annotated[str, typer.Argument(help="environment name")],
    split: Annotated[str | None, typer.Option(help="train, validation, ...")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 20,
    offset: Annotated[int, typer.Option(min=0)] = 0,
) -> None:
    """List an environment's tasks (prompts only, never answers)."""
    entry = load_entry(env)
    all_tasks = entry.dataset.tasks(split)
    table = Table("id", "prompt", title=f"{env} tasks {offset}–{offset + limit} of {len(all_tasks)}")
    for task in all_tasks[offset : offset + limit]:
        prompt = task.prompt if isinstance(task.prompt, str) else str(task.prompt[-1].get("content", ""))
        table.add_row(task.id, prompt.replace("\n", " ")[:100])
    console.print(table)
