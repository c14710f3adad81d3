"""Per-tenant quotas, kept in this process's memory: live sessions, sandbox seconds and requests per second.

- live sessions: a create is refused while the tenant holds `live_sessions` (creates in progress count,
  so concurrent creates cannot overshoot);
- sandbox seconds: the wall seconds the tenant's sessions were open (each may hold a sandbox) within the
  current fixed window of `window_s`; a create is refused once they reach `sandbox_seconds`, until the
  next window begins (`Retry-After` says when);
- requests per second: a token bucket of `burst` tokens refilled at `requests_per_s`.
Each refusal is a `QuotaExceeded` (429, `Retry-After`). With several replicas each enforces its own
share; the numbers are per process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from gym_server.auth.errors import QuotaExceeded
from gym_server.core.settings import QuotaSettings

__all__ = ["TenantQuotas"]


class TenantQuotas:
    """The quota books of every tenant; the auth middleware and the session manager consult one instance."""

    def __init__(
        self, settings: QuotaSettings, retry_after_s: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, when)
        self._reserved: dict[str, int] = {}  # tenant -> creates in progress
        self._live: dict[str, dict[str, float]] = {}  # tenant -> session id -> opened at
        self._used: dict[str, tuple[int, float]] = {}  # tenant -> (window number, seconds of ended sessions)

    def __repr__(self) -> str:
        return f"TenantQuotas(tenants={len(self._live)})"

    # -- requests per second --------------------------------------------------------------------------

    def take_request(self, tenant: str) -> None:
        """Count one request; raises `QuotaExceeded` when the tenant's bucket is empty."""
        rate = self.settings.requests_per_s
        if rate is None:
            return
        now, burst = self._clock(), float(self.settings.burst)
        tokens, when = self._buckets.get(tenant, (burst, now))
        tokens = min(burst, tokens + (now - when) * rate)
        if tokens < 1.0:
            self._buckets[tenant] = (tokens, now)
            wait = math.ceil((1.0 - tokens) / rate)
            raise QuotaExceeded(f"tenant {tenant!r} is over {rate:g} requests per second", max(1, wait))
        self._buckets[tenant] = (tokens - 1.0, now)

    # -- sessions ---------------------------------------------------------------------------------------

    def reserve_session(self, tenant: str) -> None:
        """Admit one more session of `tenant` before it starts; `opened` or `unreserve` must follow.

        Raises:
            QuotaExceeded: at the live-session quota, or out of sandbox seconds for this window.
        """
        limit = self.settings.live_sessions
        holding = len(self._live.get(tenant, {})) + self._reserved.get(tenant, 0)
        if limit is not None and holding >= limit:
            raise QuotaExceeded(
                f"tenant {tenant!r} holds its maximum of {limit} live sessions", self._retry_after_s
            )
        budget = self.settings.sandbox_seconds
        if budget is not None:
            now = self._clock()
            window = self.settings.window_s
            if self.sandbox_seconds(tenant) >= budget:
                next_window = (math.floor(now / window) + 1) * window
                raise QuotaExceeded(
                    f"tenant {tenant!r} used its {budget:g} sandbox seconds of this {window:g} s window",
                    max(1, math.ceil(next_window - now)),
                )
        self._reserved[tenant] = self._reserved.get(tenant, 0) + 1

    def unreserve(self, tenant: str) -> None:
        """A reserved session did not start."""
        self._reserved[tenant] -= 1

    def opened(self, tenant: str, session_id: str) -> None:
        """A reserved session started."""
        self._reserved[tenant] -= 1
        self._live.setdefault(tenant, {})[session_id] = self._clock()

    def ended(self, tenant: str, session_id: str) -> None:
        """A session ended (any way): its open time within this window is charged."""
        opened_at = self._live.get(tenant, {}).pop(session_id, None)
        if opened_at is None:
            return
        window_number, start = self._window()
        number, seconds = self._used.get(tenant, (window_number, 0.0))
        if number != window_number:
            seconds = 0.0
        self._used[tenant] = (window_number, seconds + self._clock() - max(opened_at, start))

    def sandbox_seconds(self, tenant: str) -> float:
        """Seconds the tenant's sessions have been open in the current window, live ones included."""
        window_number, start = self._window()
        number, seconds = self._used.get(tenant, (window_number, 0.0))
        used = seconds if number == window_number else 0.0
        now = self._clock()
        return used + sum(now - max(opened_at, start) for opened_at in self._live.get(tenant, {}).values())

    def _window(self) -> tuple[int, float]:
        number = math.floor(self._clock() / self.settings.window_s)
        return number, number * self.settings.window_s
