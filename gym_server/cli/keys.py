"""`gym-server keys`: create, list and revoke API keys in the configured database (SQLite or PostgreSQL).

The schema is brought to head first, so the first admin key can be made before the server ever ran. A
new key is printed once, on stdout alone (so `KEY=$(gym-server keys create ...)` captures it); only its
hash is stored. `list` never prints a key or a hash.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from gym_server.auth.keys import Scope
from gym_server.auth.keystore import create_key, list_keys, revoke_key
from gym_server.cli.db import DatabaseUrlOption, fail, resolve_database_url
from gym_server.store.migrate import make_engine, upgrade_database

__all__ = ["app"]

app = typer.Typer(
    help="Manage API keys: scopes episodes, read, admin; one tenant each.", no_args_is_help=True
)
console = Console()
errors = Console(stderr=True)


@app.command()
def create(
    tenant: Annotated[str, typer.Option("--tenant", help="whose trajectories the key creates and sees")],
    scope: Annotated[
        list[Scope], typer.Option("--scope", help="episodes, read or admin (repeat for several)")
    ],
    name: Annotated[str | None, typer.Option("--name", help="a label shown by `keys list`")] = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Make a key and print it once; store only its hash."""
    url = resolve_database_url(database_url)
    try:
        upgrade_database(url)
        engine = make_engine(url)
        try:
            info, key = create_key(engine, tenant, [s.value for s in scope], name)
        finally:
            engine.dispose()
    except ValueError as exc:
        errors.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from exc
    except SQLAlchemyError as exc:
        raise fail("cannot store the key", exc) from exc
    scopes = ",".join(sorted(info.scopes))
    errors.print(f"Key {info.id} for tenant {escape(info.tenant)} ({scopes}); it is shown only now:")
    print(key)


@app.command("list")
def list_command(database_url: DatabaseUrlOption = None) -> None:
    """Every key's id, tenant, scopes, name and dates (never the key or its hash)."""
    url = resolve_database_url(database_url)
    try:
        upgrade_database(url)
        engine = make_engine(url)
        try:
            keys = list_keys(engine)
        finally:
            engine.dispose()
    except SQLAlchemyError as exc:
        raise fail("cannot read the keys", exc) from exc
    table = Table("id", "tenant", "scopes", "name", "created", "revoked")
    for info in keys:
        table.add_row(
            info.id,
            escape(info.tenant),
            ",".join(sorted(info.scopes)),
            escape(info.name or ""),
            info.created_at.isoformat(timespec="seconds"),
            info.revoked_at.isoformat(timespec="seconds") if info.revoked_at else "",
        )
    console.print(table)


@app.command()
def revoke(
    key_id: Annotated[str, typer.Argument(help="the key's id, as `keys list` shows it")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """Revoke a key; servers refuse it within their `auth.refresh_s` (default 1 s)."""
    url = resolve_database_url(database_url)
    try:
        engine = make_engine(url)
        try:
            revoked = revoke_key(engine, key_id)
        finally:
            engine.dispose()
    except SQLAlchemyError as exc:
        raise fail("cannot revoke the key", exc) from exc
    if not revoked:
        errors.print(f"[red]no active key {escape(key_id)}[/red]")
        raise typer.Exit(1)
    console.print(f"Revoked key {escape(key_id)}")
