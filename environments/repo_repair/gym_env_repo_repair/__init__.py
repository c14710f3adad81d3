"""The `repo_repair` environment: fix a bug in a small generated Python package, scored by hidden tests."""
