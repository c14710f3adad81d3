"""Other ecosystems' protocols in front of the gym's own sessions.

Each facade here speaks a peer's wire protocol (MCP first) and drives the same `SessionManager` as the
native `/v1/sessions` routes, so an episode opened through any of them obeys the same TTL, capacity,
budgets and sandbox admission, and leaves the same trajectory row. A facade whose peer package is an
optional extra is mounted only when that package is importable; the service starts without it.
"""
