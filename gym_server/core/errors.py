"""Every error the gym raises on purpose, and the HTTP problem each one becomes.

Domain code raises these; `gym_server.core.problems` renders any of them as an RFC 9457
`application/problem+json` body in one place, so no route builds an error response by hand and no
client ever sees a traceback. The tree::

    GymError (500 internal)
    ├── NotFoundError (404)
    │   ├── EnvironmentNotFound
    │   ├── TaskNotFound
    │   ├── SplitNotFound
    │   ├── SessionNotFound
    │   ├── RolloutNotFound
    │   ├── PolicyRunNotFound
    │   └── LeaseNotFound
    ├── SessionFinished (409)
    ├── BufferConflict (409)
    │   ├── VersionBackwards
    │   └── LeaseExpired
    ├── SessionExpired (410)
    │   └── SessionLost (its replica died; the Ray entry point answers it)
    ├── PayloadTooLarge (413)
    ├── UnsupportedMediaType (415)
    ├── InvalidRequest (422)
    │   └── EndpointNotAllowed
    ├── AtCapacity (429, Retry-After)
    │   ├── SandboxesBusy
    │   └── BufferFull (the rollout buffer is as far ahead of the trainer as its bound allows)
    ├── TooManyConnections (503, Retry-After, the connection closed)
    ├── BackendUnavailable (503)
    │   ├── StoreUnavailable
    │   ├── SandboxUnavailable
    │   └── ReplicaUnavailable (the Ray entry point: no replica answers yet)
    └── EnvironmentDefinitionError (500, raised at registration for a broken environment class)

A model's bad tool call is never one of these: it becomes a tool message the model reads.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AtCapacity",
    "BackendUnavailable",
    "BufferConflict",
    "BufferFull",
    "EndpointNotAllowed",
    "EnvironmentDefinitionError",
    "EnvironmentNotFound",
    "GymError",
    "InvalidRequest",
    "LeaseExpired",
    "LeaseNotFound",
    "NotFoundError",
    "PayloadTooLarge",
    "PolicyRunNotFound",
    "ReplicaUnavailable",
    "RolloutNotFound",
    "SandboxUnavailable",
    "SandboxesBusy",
    "SessionExpired",
    "SessionFinished",
    "SessionLost",
    "SessionNotFound",
    "SplitNotFound",
    "StoreRefused",
    "StoreUnavailable",
    "TaskNotFound",
    "TooManyConnections",
    "UnsupportedMediaType",
    "VersionBackwards",
]


class GymError(Exception):
    """Base of every deliberate gym error; carries what its problem+json rendering needs."""

    status: ClassVar[int] = 500
    slug: ClassVar[str] = "internal"
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    @property
    def headers(self) -> dict[str, str]:
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.detail!r})"


class NotFoundError(GymError):
    """A named resource does not exist."""

    status = 404
    slug = "not-found"
    title = "Not found"


class EnvironmentNotFound(NotFoundError):
    """No registered environment has this name."""

    slug = "environment-not-found"
    title = "Unknown environment"

    def __init__(self, env: str, known: list[str] | None = None, reason: str | None = None) -> None:
        hint = f"; known environments: {', '.join(sorted(known))}" if known else ""
        hint = f": {reason}" if reason else hint
        super().__init__(f"no environment named {env!r}{hint}", env=env)


class TaskNotFound(NotFoundError):
    """The environment's datasets hold no task with this id."""

    slug = "task-not-found"
    title = "Unknown task"

    def __init__(self, env: str, task_id: str) -> None:
        super().__init__(f"environment {env!r} has no task {task_id!r}", env=env, task_id=task_id)


class SplitNotFound(NotFoundError):
    """A task was to be drawn from a split the environment's dataset does not have (or that is empty)."""

    slug = "split-not-found"
    title = "Unknown split"

    def __init__(self, env: str, split: str | None, known: dict[str, int]) -> None:
        listed = ", ".join(f"{name} ({size} tasks)" for name, size in known.items()) or "none"
        what = f"no split {split!r}" if split is not None else "no split to draw from"
        super().__init__(
            f"environment {env!r} has {what} with tasks; its splits: {listed}", env=env, split=split
        )


class SessionNotFound(NotFoundError):
    """No session with this id was ever opened on this server (or it was closed long ago)."""

    slug = "session-not-found"
    title = "Unknown session"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}", session_id=session_id)


class RolloutNotFound(NotFoundError):
    """No stored trajectory has this id."""

    slug = "rollout-not-found"
    title = "Unknown rollout"

    def __init__(self, rollout_id: str) -> None:
        super().__init__(f"no stored rollout {rollout_id!r}", rollout_id=rollout_id)


class PolicyRunNotFound(NotFoundError):
    """No trainer announced a version for this policy run (`POST /v1/policy-runs/{run}/versions`)."""

    slug = "policy-run-not-found"
    title = "Unknown policy run"

    def __init__(self, run: str) -> None:
        super().__init__(
            f"no policy run {run!r}: announce its version first (POST /v1/policy-runs/{{run}}/versions)",
            run=run,
        )


class LeaseNotFound(NotFoundError):
    """The policy run never handed out a lease with this id."""

    slug = "lease-not-found"
    title = "Unknown lease"

    def __init__(self, run: str, lease_id: str) -> None:
        super().__init__(f"policy run {run!r} handed out no lease {lease_id!r}", run=run, lease_id=lease_id)


class BufferConflict(GymError):
    """A rollout-buffer request contradicts what the run already holds."""

    status = 409
    slug = "buffer-conflict"
    title = "Rollout buffer conflict"


class VersionBackwards(BufferConflict):
    """An announced policy version is lower than the run's: versions only grow (a restarted trainer
    resumes from its checkpoint's step, or starts a new run)."""

    slug = "version-backwards"
    title = "Policy version went backwards"

    def __init__(self, run: str, version: int, current: int) -> None:
        super().__init__(
            f"policy run {run!r} is at version {current}; {version} would go backwards "
            "(announce a version >= the current one, or use a new run)",
            run=run,
            version=version,
            current=current,
        )


class LeaseExpired(BufferConflict):
    """A lease expired unacknowledged and holds none of its groups any more: another pull took them, or
    the staleness bound marked them; nothing was consumed."""

    slug = "lease-expired"
    title = "Lease expired"

    def __init__(self, run: str, lease_id: str) -> None:
        super().__init__(
            f"lease {lease_id!r} of policy run {run!r} expired and its groups were handed out again or "
            "marked stale; pull again (a longer lease_s keeps a batch through a slow step)",
            run=run,
            lease_id=lease_id,
        )


class SessionFinished(GymError):
    """A step arrived for an episode that is already done; verify, get or close it instead."""

    status = 409
    slug = "session-finished"
    title = "Session finished"

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(
            f"session {session_id!r} is finished ({reason}); call verify, GET or DELETE instead of step",
            session_id=session_id,
            reason=reason,
        )


class SessionExpired(GymError):
    """The session is gone: reaped after its idle TTL, or closed. Its trajectory is stored."""

    status = 410
    slug = "session-expired"
    title = "Session gone"

    def __init__(self, session_id: str, how: str = "expired after its idle TTL") -> None:
        super().__init__(
            f"session {session_id!r} {how}; its trajectory is stored (GET /v1/rollouts/{session_id}), "
            "start a new session",
            session_id=session_id,
        )


class SessionLost(SessionExpired):
    """The replica that held the session died (process or node); what it acknowledged is stored as
    `lost`, and `rollout` points at it."""

    slug = "session-lost"
    title = "Session lost"

    def __init__(self, session_id: str, replica: str) -> None:
        GymError.__init__(
            self,
            f"session {session_id!r} was lost when its replica {replica!r} died; everything acknowledged is "
            f"stored as lost (GET /v1/rollouts/{session_id}), start a new session",
            session_id=session_id,
            replica=replica,
            rollout=f"/v1/rollouts/{session_id}",
        )


class PayloadTooLarge(GymError):
    """A request body is over the configured limit."""

    status = 413
    slug = "payload-too-large"
    title = "Payload too large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"request body of {size} bytes is over the limit of {limit} bytes", size=size, limit=limit
        )


class UnsupportedMediaType(GymError):
    """A request body is not declared `application/json`, so it is refused before anyone reads it."""

    status = 415
    slug = "unsupported-media-type"
    title = "Unsupported media type"

    def __init__(self, content_type: str | None) -> None:
        said = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        super().__init__(
            f"request bodies must be JSON sent as 'Content-Type: application/json'; this one has {said}",
            content_type=content_type,
        )


class InvalidRequest(GymError):
    """The request is well-formed JSON but not a valid message, task or parameter set."""

    status = 422
    slug = "invalid-request"
    title = "Invalid request"


class EndpointNotAllowed(InvalidRequest):
    """A request names an endpoint for the server to call that the operator's allow-list does not hold;
    refused before any connection is made (see `gym_server.core.egress`)."""

    slug = "endpoint-not-allowed"
    title = "Endpoint not allowed"


class AtCapacity(GymError):
    """The server holds as many live sessions (or playing runs) as it may; retry after the hinted delay."""

    status = 429
    slug = "at-capacity"
    title = "At capacity"

    def __init__(self, limit: int, retry_after_s: int, what: str = "live sessions") -> None:
        super().__init__(
            f"the server holds its maximum of {limit} {what}; retry in {retry_after_s} s",
            limit=limit,
        )
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class SandboxesBusy(AtCapacity):
    """No room for one more sandbox now: the cap on running sandboxes or their memory/CPU budget is taken."""

    slug = "sandboxes-busy"
    title = "No sandbox free"

    def __init__(self, detail: str, retry_after_s: int, **extra: Any) -> None:
        GymError.__init__(self, detail, **extra)  # the detail names which limit, unlike AtCapacity's
        self.retry_after_s = retry_after_s


class BufferFull(AtCapacity):
    """A producer asked to play one more group, but the run holds as many as its staleness bound allows
    at the current version; retry once the trainer announced the next one (a throttle, not a failure)."""

    slug = "buffer-full"
    title = "Rollout buffer full"

    def __init__(self, run: str, version: int, limit: int) -> None:
        GymError.__init__(
            self,
            f"policy run {run!r} holds its {limit} groups allowed at version {version}; retry in 1 s",
            run=run,
            version=version,
            limit=limit,
        )
        self.retry_after_s = 1


class TooManyConnections(GymError):
    """The server holds as many client connections as it may; this one is answered and closed."""

    status = 503
    slug = "too-many-connections"
    title = "Too many connections"

    def __init__(self, limit: int, retry_after_s: int) -> None:
        super().__init__(
            f"the server holds its maximum of {limit} connections; retry in {retry_after_s} s", limit=limit
        )
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s), "Connection": "close"}


class BackendUnavailable(GymError):
    """A backend the request needs (database, sandbox engine) does not answer."""

    status = 503
    slug = "backend-unavailable"
    title = "Backend unavailable"

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": "5"}


class StoreUnavailable(BackendUnavailable):
    """The trajectory database does not answer."""

    slug = "store-unavailable"
    title = "Trajectory store unavailable"


class StoreRefused(StoreUnavailable):
    """The database refused a trajectory's record for its content (a constraint, a value it cannot keep).

    Nothing was acknowledged: the store keeps the refused record and writes it again when the same
    acknowledgement is asked for again (a retried close), so a refusal that was transient heals, and
    one that is not keeps answering this error, never a 2xx without the row.
    """

    slug = "store-refused"
    title = "Trajectory refused by the store"


class SandboxUnavailable(BackendUnavailable):
    """No sandbox backend can run code right now."""

    slug = "sandbox-unavailable"
    title = "Sandbox unavailable"


class ReplicaUnavailable(BackendUnavailable):
    """The Ray entry point has no replica that answers for this request yet (starting, or being checked)."""

    slug = "replica-unavailable"
    title = "No replica available"

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class EnvironmentDefinitionError(GymError):
    """An environment class is malformed (bad tool name, missing name, unreadable dataset)."""

    slug = "environment-definition"
    title = "Broken environment definition"
