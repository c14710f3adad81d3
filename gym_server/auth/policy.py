"""Which scope a request needs, from its method and path alone (so the gate runs before any routing).

Public: liveness and readiness probes, the offline API docs, the /ui login page and the UI's static
assets. Everything else needs a valid key; the scope by area:
- `episodes`: sessions (native and their fast path), `/v1/verify`, starting a server-driven run
  (`POST /v1/rollouts`), the protocol facades under `/v1/environments/{env}/{mcp,openenv,nemo-gym}`,
  and the rollout buffer's changes (`POST /v1/policy-runs/...`: announce, admit, pull, acknowledge);
- `read`: stored rollouts and run boards (`GET /v1/rollouts...`), policy runs (`GET /v1/policy-runs/...`),
  `/metrics`, `/ui`;
- `admin`: re-scoring (`POST /v1/rollouts/{id}/reverify`) and any deletion of stored rollouts;
- any scope: the environment catalog (`/v1/environments`, tasks), which every client needs to start, and
  its curriculum (`/v1/environments/{env}/curriculum`), which reads the caller's own tenant's pass rates.
"""

from __future__ import annotations

import re
from enum import Enum

from gym_server.auth.keys import Scope

__all__ = [
    "ANY_SCOPE",
    "PUBLIC",
    "UI_LOGIN",
    "UI_LOGOUT",
    "UI_PREFIX",
    "Requirement",
    "is_ui",
    "required_scope",
]


class Requirement(Enum):
    PUBLIC = "public"
    ANY_SCOPE = "any"


PUBLIC = Requirement.PUBLIC
ANY_SCOPE = Requirement.ANY_SCOPE

UI_PREFIX = "/ui"
UI_LOGIN = "/ui/login"
UI_LOGOUT = "/ui/logout"

_PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)
_PUBLIC_PREFIXES = ("/static-offline-docs/", "/ui/static/")
_FACADE = re.compile(r"/v1/environments/.+/(mcp|openenv|nemo-gym)(/.*)?")
_REVERIFY = re.compile(r"/v1/rollouts/[^/]+/reverify")


def is_ui(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


def required_scope(method: str, path: str) -> Scope | Requirement:
    """What a request must carry: a scope, any valid key, or nothing."""
    if path in _PUBLIC_PATHS or path == UI_LOGIN or path.startswith(_PUBLIC_PREFIXES):
        return PUBLIC
    if path == "/metrics" or is_ui(path):
        return Scope.READ
    if path.startswith(("/v1/sessions", "/v1/verify")) or _FACADE.fullmatch(path):
        return Scope.EPISODES
    if path.startswith("/v1/environments"):
        return ANY_SCOPE
    if path.startswith("/v1/policy-runs"):
        return Scope.READ if method == "GET" else Scope.EPISODES
    if path.startswith("/v1/rollouts"):
        if method == "DELETE" or _REVERIFY.fullmatch(path):
            return Scope.ADMIN
        if method == "POST" and path.rstrip("/") == "/v1/rollouts":
            return Scope.EPISODES
        return Scope.READ
    return ANY_SCOPE
