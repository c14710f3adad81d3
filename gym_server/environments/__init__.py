"""Built-in environments, one folder each (env.py, README.md, fixtures, tests)."""
