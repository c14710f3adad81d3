"""Alembic scripts of the trajectory store; run them through `gym_server.store.migrate.upgrade_database`."""
