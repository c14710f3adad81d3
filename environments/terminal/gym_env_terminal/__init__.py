"""The `terminal` environment: shell tasks in a sandbox, scored on the files they leave behind."""
