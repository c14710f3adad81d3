"""`gym-server keys` against SQLite and PostgreSQL: a key printed once on stdout alone, listed without
its secret or hash, revoked once; bad tenants and scopes are one line and exit 2."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from typer.testing import CliRunner

from gym_server.auth.keys import hash_secret, split_key
from gym_server.cli.main import app as cli
from gym_server.store.migrate import make_engine
from gym_server.store.models import api_keys_table


def test_create_list_revoke(database_url: str, tenant: Callable[[], str]) -> None:
    runner = CliRunner()
    name = tenant()
    created = runner.invoke(
        cli,
        [
            "keys",
            "create",
            "--tenant",
            name,
            "--scope",
            "read",
            "--scope",
            "episodes",
            "--name",
            "ci",
            "--database-url",
            database_url,
        ],
    )
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    parts = split_key(key)
    assert parts is not None, created.stdout  # stdout holds the key and nothing else
    key_id, secret = parts
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            row = connection.execute(select(api_keys_table).where(api_keys_table.c.id == key_id)).one()
    finally:
        engine.dispose()
    assert row.secret_hash == hash_secret(secret) and secret not in str(tuple(row))
    assert (row.tenant, row.scopes, row.name, row.revoked_at) == (name, "episodes,read", "ci", None)

    listed = runner.invoke(cli, ["keys", "list", "--database-url", database_url])
    assert listed.exit_code == 0 and key_id in listed.stdout and name in listed.stdout
    assert secret not in listed.stdout and row.secret_hash not in listed.stdout

    assert runner.invoke(cli, ["keys", "revoke", key_id, "--database-url", database_url]).exit_code == 0
    again = runner.invoke(cli, ["keys", "revoke", key_id, "--database-url", database_url])
    assert again.exit_code == 1 and "no active key" in again.output


def test_bad_tenant_or_scope_is_one_line_and_exit_2(database_url: str) -> None:
    runner = CliRunner()
    bad_tenant = runner.invoke(
        cli, ["keys", "create", "--tenant", "a b", "--scope", "read", "--database-url", database_url]
    )
    assert (
        bad_tenant.exit_code == 2
        and "use 1-64 letters" in bad_tenant.output
        and "Traceback" not in bad_tenant.output
    )
    bad_scope = runner.invoke(
        cli, ["keys", "create", "--tenant", "a", "--scope", "root", "--database-url", database_url]
    )
    assert bad_scope.exit_code == 2 and "'root' is not one of" in bad_scope.output
    # A name the store could not keep on PostgreSQL (VARCHAR(255)) is refused on both, before anything.
    long_name = runner.invoke(
        cli,
        [
            "keys",
            "create",
            "--tenant",
            "a",
            "--scope",
            "read",
            "--name",
            "n" * 256,
            "--database-url",
            database_url,
        ],
    )
    assert long_name.exit_code == 2 and "over the store's 255" in long_name.output
    listed = runner.invoke(cli, ["keys", "list", "--database-url", database_url])
    assert "n" * 256 not in listed.stdout
