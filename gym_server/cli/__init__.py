"""The `gym-server` command line: one module per command group."""
