"""`gym-server db`: the trajectory database's schema, for operators.

The server migrates on start-up anyway (`TrajectoryStore.start`); running `gym-server db upgrade` as a
deploy step makes a wrong URL or a missing permission fail there, before any replica takes traffic.
Every command reads its URL from `--database-url`, else from the server's own settings (`GYM_DATABASE_URL`
or `GYM_STORE__URL`, default SQLite at `GYM_STORE__PATH`, see docs/install.md), and never prints a
password.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.exc import SQLAlchemyError

from gym_server.core.settings import Settings
from gym_server.store.migrate import (
    current_revision,
    describe_error,
    head_revision,
    mask_url,
    upgrade_database,
)

__all__ = ["DatabaseUrlOption", "app", "resolve_database_url"]

app = typer.Typer(help="Manage the trajectory database: schema migrations.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)

DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL of the store (default: GYM_DATABASE_URL, GYM_STORE__URL, or SQLite at "
        "GYM_STORE__PATH, default ~/.local/share/gym-server/gym.db).",
        show_default=False,
    ),
]


def resolve_database_url(database_url: str | None) -> str:
    """The URL given on the command line, else the one the server would use (with a warning on stderr
    when an old `./var/gym.db` sits beside it, see `StoreSettings.stray_warning`)."""
    if database_url:
        return database_url
    store = Settings().store
    warning = store.stray_warning()
    if warning:
        errors.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    return store.resolved_url()


def fail(message: str, exc: BaseException) -> typer.Exit:
    """Print `message` and the cause on stderr; the caller raises the returned exit (status 1)."""
    errors.print(f"[red]{escape(message)}:[/red] {escape(describe_error(exc))}")
    return typer.Exit(1)


@app.command()
def upgrade(database_url: DatabaseUrlOption = None) -> None:
    """Bring the schema to the newest revision; creates the tables on an empty database."""
    url = resolve_database_url(database_url)
    console.print(f"Database [bold]{escape(mask_url(url))}[/bold]")
    try:
        before = current_revision(url)
        upgrade_database(url)
    except SQLAlchemyError as exc:
        raise fail("cannot upgrade the trajectory database", exc) from exc
    head = head_revision()
    if before == head:
        console.print(f"[green]Already at head revision {head}[/green]")
    else:
        console.print(f"[green]Upgraded to head revision {head}[/green] (from {before or 'an empty schema'})")


@app.command()
def current(database_url: DatabaseUrlOption = None) -> None:
    """Show the database's schema revision beside the newest one this version ships."""
    url = resolve_database_url(database_url)
    try:
        revision = current_revision(url)
    except SQLAlchemyError as exc:
        raise fail("cannot read the trajectory database", exc) from exc
    head = head_revision()
    state = (
        "[green]up to date[/green]" if revision == head else "[yellow]run `gym-server db upgrade`[/yellow]"
    )
    console.print(
        f"Database [bold]{escape(mask_url(url))}[/bold]: revision {revision or 'none'}, head {head}, {state}"
    )
