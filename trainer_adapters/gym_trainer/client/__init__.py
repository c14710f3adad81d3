"""The trainer side's HTTP client for the gym: async first, with a blocking twin for scripts.

Why its own client rather than raw httpx calls in every adapter: a training run opens thousands of
sessions against one or several replicas, and the failure modes must be handled once, the same way
everywhere. What it guarantees:

- one pooled `httpx.AsyncClient` per client (keep-alive; `max_connections` bounds the sockets, and a
  request waiting for a free connection waits at most `timeouts.pool`);
- a timeout on every phase of every request (connect, read, write, pool), never an unbounded wait;
- bounded retries with exponential backoff and jitter, only where a retry cannot apply a request twice
  (`retry`): a 429 (honouring `Retry-After`) or 503 answer, or a request the server never read.
  Idempotent calls (GET, DELETE, verify) are also retried after a dropped connection; a step the
  server may have read never is;
- several replicas (`serve --workers N`): new sessions go round-robin, and each session's later calls
  stay on the replica that created it.

Modules: `errors` (what it raises), `records` (typed answers), `retry` (the policy), `async_client`
(`GymClient`), `sync_client` (`SyncGymClient`). Import everything from here.
"""

from __future__ import annotations

from gym_trainer.client.async_client import GymClient
from gym_trainer.client.errors import (
    GymAPIError,
    GymClientError,
    GymTransportError,
    GymUnavailable,
)
from gym_trainer.client.keys import API_KEY_VARIABLE, gym_api_key
from gym_trainer.client.records import (
    EnvironmentInfo,
    ForkInfo,
    SessionInfo,
    StepResult,
    VerifyResult,
)
from gym_trainer.client.retry import RetryPolicy, Timeouts
from gym_trainer.client.sync_client import SyncGymClient

__all__ = [
    "API_KEY_VARIABLE",
    "EnvironmentInfo",
    "ForkInfo",
    "GymAPIError",
    "GymClient",
    "GymClientError",
    "GymTransportError",
    "GymUnavailable",
    "RetryPolicy",
    "SessionInfo",
    "StepResult",
    "SyncGymClient",
    "Timeouts",
    "VerifyResult",
    "gym_api_key",
]
