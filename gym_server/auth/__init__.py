"""API keys, scopes and tenants: who may call the gym, and whose trajectories a caller sees.

`keys` (format, hashing, scopes), `keystore` (the `api_keys` table), `keytable` (the in-memory copy the
hot path checks), `policy` (which scope a path needs), `quotas` (per-tenant limits), `middleware` (the
ASGI gate in front of every route), `ui_login` (the /ui login form and cookie sessions), `mode` (whether
authentication is on for a given bind address).
"""
