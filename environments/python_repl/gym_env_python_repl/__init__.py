"""The `python_repl` environment: a persistent Python interpreter per session, inside a sandbox."""
