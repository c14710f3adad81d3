"""Alembic environment of the trajectory store.

Only `gym_server.store.migrate.upgrade_database` runs it, handing over an open connection from the
store's own `make_engine` (SQLite pragmas, Postgres advisory lock), so there is no `alembic.ini` and no URL
here. Offline (`--sql`) mode is not offered: the schema is small and always applied by the server or by
`gym-server db upgrade`.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from gym_server.store.models import Base

connection = context.config.attributes.get("connection")
if context.is_offline_mode() or not isinstance(connection, Connection):
    raise RuntimeError(
        "run migrations with gym_server.store.migrate.upgrade_database(url) or `gym-server db upgrade`"
    )

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things in place; batch mode copies the table, so future revisions port.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
