"""Live sessions: the manager that owns them and the reaper that expires them."""
