"""The auth errors, rendered as problem+json by the app's `GymError` handler like every other error."""

from __future__ import annotations

from typing import ClassVar

from gym_server.core.errors import GymError

__all__ = ["Forbidden", "QuotaExceeded", "Unauthorized"]


class Unauthorized(GymError):
    """No key, or one that is malformed, unknown or revoked; the detail never says which (or echoes it)."""

    status = 401
    slug: ClassVar[str] = "unauthorized"
    title: ClassVar[str] = "Unauthorized"

    def __init__(self) -> None:
        super().__init__("a valid API key is required: send `Authorization: Bearer <key>`")

    @property
    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="gym-server"'}


class Forbidden(GymError):
    """The key is valid but lacks the scope the request needs (or a /ui form lacked its CSRF token)."""

    status = 403
    slug: ClassVar[str] = "forbidden"
    title: ClassVar[str] = "Forbidden"


class QuotaExceeded(GymError):
    """A tenant is over one of its quotas; it may retry after the hinted delay."""

    status = 429
    slug: ClassVar[str] = "quota-exceeded"
    title: ClassVar[str] = "Quota exceeded"

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail, retry_after_s=retry_after_s)
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}
