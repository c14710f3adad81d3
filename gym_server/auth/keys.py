"""API keys: their format, how a secret is hashed and checked, scopes, and the principal a key stands for.

A key reads `gym_<id>_<secret>`: the recognisable prefix lets secret scanners and people spot one, the
id (public, 12 hex digits) names the stored row so a check is one dictionary lookup (never a search by
prefix whose timing could depend on the secret), and the secret is 32 random bytes (256 bits). Only a
SHA-256 of the secret is stored; see docs/decisions.md for why not a slow password hash.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "KEY_PREFIX",
    "Principal",
    "Scope",
    "hash_secret",
    "new_key",
    "parse_scopes",
    "secret_matches",
    "split_key",
    "validate_tenant",
]

KEY_PREFIX = "gym_"
_KEY = re.compile(r"gym_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Scope(StrEnum):
    """What a key may do. `admin` implies the other two."""

    EPISODES = "episodes"  # create and step sessions, native and through the protocol facades
    READ = "read"  # stored rollouts, run boards, /metrics, /ui
    ADMIN = "admin"  # re-scoring, deletion, key management


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: `request.state.principal` (None when authentication is off)."""

    key_id: str
    tenant: str
    scopes: frozenset[Scope]

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or Scope.ADMIN in self.scopes


def hash_secret(secret: str) -> str:
    """The stored form of a secret: SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Whether `secret` hashes to `stored_hash`, compared in time independent of where they differ."""
    return hmac.compare_digest(hash_secret(secret).encode(), stored_hash.encode())


def new_key() -> tuple[str, str, str]:
    """A fresh key: (id, the whole key to show once, the hash to store)."""
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return key_id, f"{KEY_PREFIX}{key_id}_{secret}", hash_secret(secret)


def split_key(key: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed key, else None."""
    match = _KEY.fullmatch(key)
    return None if match is None else (match[1], match[2])


def parse_scopes(names: list[str] | str) -> frozenset[Scope]:
    """Scopes from names (a list, or one comma-separated string).

    Raises:
        ValueError: an unknown name, or none at all.
    """
    items = names.split(",") if isinstance(names, str) else names
    try:
        scopes = frozenset(Scope(name.strip()) for name in items if name.strip())
    except ValueError as exc:
        raise ValueError(f"{exc}; scopes are {', '.join(s.value for s in Scope)}") from None
    if not scopes:
        raise ValueError("a key needs at least one scope")
    return scopes


def validate_tenant(tenant: str) -> str:
    """The tenant name if it is 1-64 letters, digits, `.`, `_` or `-` (starting alphanumeric).

    Raises:
        ValueError: otherwise.
    """
    if not _TENANT.fullmatch(tenant):
        raise ValueError(f"tenant {tenant!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return tenant
