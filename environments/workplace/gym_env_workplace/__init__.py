"""The `workplace` environment: multi-turn errands over a calendar, an inbox and a task list."""
