"""The client's retry policy: which failures may be sent again, and how long to wait first.

A request is sent again only when that cannot apply it twice:

- the gym refused it: 429 (at capacity) or 503 (a backend is down), honouring `Retry-After`;
- it never reached the server: connect error, connect or pool timeout;
- the server reset the connection while our request sat unread in its socket buffer. The kernel
  resets (rather than closes) a socket only when it is closed with input unread, and uvicorn never
  aborts a connection, so a reset means the request was never parsed. This is what a gym that stalled
  past its keep-alive timeout does on waking: it closes the idle connections before reading the
  requests already waiting in them;
- for idempotent calls only (GET, DELETE, verify): a dropped connection or a read timeout after
  sending, which may have been applied.
"""

from __future__ import annotations

import email.utils
import random
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

__all__ = ["MAYBE_SENT", "NOT_SENT", "RETRY_STATUSES", "RetryPolicy", "Timeouts", "never_read", "retry_after"]

RETRY_STATUSES = frozenset({429, 503})
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
MAYBE_SENT = (
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds allowed per phase of a request. `read` bounds a step, which runs the tools."""

    connect: float = 5.0
    read: float = 120.0
    write: float = 30.0
    pool: float = 120.0

    def httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries: `attempts` in all, exponential backoff with full jitter, capped waits.

    A `Retry-After` header wins over the computed backoff but is capped at `max_retry_after_s`, so a
    misconfigured server cannot park a trainer for an hour.
    """

    attempts: int = 6
    backoff_s: float = 0.05
    max_backoff_s: float = 5.0
    max_retry_after_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts counts the first try too: it must be at least 1")

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after_s)
        ceiling = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        return random.uniform(ceiling / 2, ceiling)


def never_read(exc: httpx.TransportError) -> bool:
    """Whether the server reset the connection with our request unread (see the module docstring)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionResetError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` as seconds (delta-seconds or an HTTP date), or None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
