"""The `sql_analyst` environment: business questions over generated SQLite databases, answered in SQL."""
