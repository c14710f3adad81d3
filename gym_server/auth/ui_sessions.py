"""Logins to /ui: an opaque random cookie names a server-side session holding a key's id and a CSRF token.

The cookie never carries the key (nor its hash). Sessions live in this process's memory (a restart logs
everyone out) and end at logout, after `auth.ui_session_ttl_s`, or as soon as their key is revoked (each
request re-checks the key's id in the key table). They are stored under a SHA-256 of the cookie, so a
lookup compares digests, not the secret cookie itself.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["COOKIE_NAME", "CSRF_FIELD", "CSRF_HEADER", "UiSession", "UiSessions"]

COOKIE_NAME = "gym_ui"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = b"x-csrf-token"


@dataclass(frozen=True, slots=True)
class UiSession:
    key_id: str
    csrf_token: str = field(repr=False)  # a secret of the login: kept out of reprs and so out of logs
    expires_at: float = 0.0


def _digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


class UiSessions:
    """The open /ui logins."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._sessions: dict[str, UiSession] = {}

    def __repr__(self) -> str:
        return f"UiSessions(open={len(self._sessions)})"

    def open(self, key_id: str) -> tuple[str, UiSession]:
        """A new login for the key `key_id`: (the cookie value, the session)."""
        now = self._clock()
        for digest in [d for d, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[digest]  # expired ones go when someone logs in
        cookie = secrets.token_urlsafe(32)
        session = UiSession(key_id, secrets.token_urlsafe(32), now + self._ttl_s)
        self._sessions[_digest(cookie)] = session
        return cookie, session

    def get(self, cookie: str) -> UiSession | None:
        session = self._sessions.get(_digest(cookie))
        if session is None or session.expires_at <= self._clock():
            return None
        return session

    def close(self, cookie: str) -> None:
        self._sessions.pop(_digest(cookie), None)
