"""The trainer side's HTTP client for the gym: async first, with a blocking twin for scripts.

Why its own client rather than raw httpx calls in every adapter: a training run opens thousands of
sessions against one or several replicas, and the failure modes must be handled once, the same way
everywhere. What it guarantees:

- one pooled `httpx.AsyncClient` per client (keep-alive; `max_connections` bounds the sockets, and a
  request waiting for a free connection waits at most `timeouts.pool`);
- a timeout on every phase of every request (connect, read, write, pool), never an unbounded wait;
- bounded retries with exponential backoff and jitter, only where a retry cannot apply a request twice:
  a 429 (honouring `Retry-After`) or 503 answer, or a request that never reached the server (connect
  error, pool timeout). Idempotent calls (GET, DELETE, verify) are also retried after a dropped
  connection; a step never is, because the server may have applied it;
- several replicas (`serve --workers N`): new sessions go round-robin, and each session's later calls
  stay on the replica that created it.

Errors: `GymAPIError` (the server answered with a problem) and its `GymUnavailable` (retries ran out on
429/503), `GymTransportError` (no answer). All derive from `GymClientError`.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx

from gym_server.trainer_adapters._loop import BackgroundLoop

__all__ = [
    "EnvironmentInfo",
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
]

T = TypeVar("T")

_RETRY_STATUSES = frozenset({429, 503})
# Requests that cannot have reached the application: always safe to send again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# A dropped connection or a read timeout after sending: safe only for idempotent calls.
_MAYBE_SENT = (
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
)


class GymClientError(Exception):
    """Base of every error this client raises."""


class GymTransportError(GymClientError):
    """The server could not be reached or did not answer in time (after any safe retries)."""


class GymAPIError(GymClientError):
    """The server answered with an error status; `problem` is its RFC 9457 body."""

    def __init__(self, status: int, problem: dict[str, Any], method: str, path: str) -> None:
        self.status = status
        self.problem = problem
        self.method = method
        self.path = path
        # `urn:gym-server:problem:session-finished` (or a URL ending in the slug) -> `session-finished`
        self.slug = re.split(r"[/:]", str(problem.get("type", "")))[-1]
        self.detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
        super().__init__(f"{method} {path} -> {status}: {self.detail}")


class GymUnavailable(GymAPIError):
    """429 or 503 answered on every attempt: the gym is at capacity or a backend is down."""


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

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after_s)
        ceiling = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A started episode: its id, the opening messages and the tools the model may call."""

    session_id: str
    env: str
    env_version: str
    task_id: str
    seed: int | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_turns: int
    expires_at: str
    base_url: str

    @classmethod
    def from_json(cls, data: dict[str, Any], base_url: str) -> SessionInfo:
        return cls(
            session_id=data["session_id"],
            env=data["env"],
            env_version=data["env_version"],
            task_id=data["task_id"],
            seed=data.get("seed"),
            messages=list(data["messages"]),
            tools=list(data.get("tools") or []),
            max_turns=int(data["max_turns"]),
            expires_at=str(data.get("expires_at", "")),
            base_url=base_url,
        )


@dataclass(frozen=True, slots=True)
class StepResult:
    """The environment's replies to one assistant message; `reward` is set when the step ended it."""

    messages: list[dict[str, Any]]
    done: bool
    reward: float | None
    info: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepResult:
        return cls(
            messages=list(data.get("messages") or []),
            done=bool(data["done"]),
            reward=data.get("reward"),
            info=dict(data.get("info") or {}),
        )


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """A score: `failure` set means "no signal" (verifier timeout, judge down), not a zero."""

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VerifyResult:
        return cls(
            reward=float(data["reward"]),
            components={k: float(v) for k, v in (data.get("components") or {}).items()},
            info=dict(data.get("info") or {}),
            failure=data.get("failure"),
        )


@dataclass(frozen=True, slots=True)
class EnvironmentInfo:
    name: str
    version: str
    verifier_version: str
    description: str
    kind: str
    max_turns: int | None
    tools: list[dict[str, Any]]
    datasets: list[dict[str, Any]]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EnvironmentInfo:
        return cls(
            name=data["name"],
            version=data["version"],
            verifier_version=data.get("verifier_version", ""),
            description=data.get("description", ""),
            kind=data.get("kind", ""),
            max_turns=data.get("max_turns"),
            tools=list(data.get("tools") or []),
            datasets=list(data.get("datasets") or []),
        )


def _retry_after(response: httpx.Response) -> float | None:
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


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"detail": response.text[:500]}
    return body if isinstance(body, dict) else {"detail": str(body)[:500]}


class GymClient:
    """Async client of the gym's HTTP API.

    ```python
    async with GymClient("http://127.0.0.1:8000") as gym:
        session = await gym.create_session("counter", task_id="counter-0000", seed=0, run="demo")
        result = await gym.step(session.session_id, {"role": "assistant", "content": "hello"})
        score = await gym.verify(session.session_id)
        await gym.close(session.session_id)
    ```

    Args:
        base_url: one server, or the replicas of `serve --workers N` (sessions are spread over them).
        timeouts: per-phase limits of every request.
        retry: the bounded retry policy for 429, 503 and requests that never left.
        max_connections: pooled sockets per client; more concurrent requests queue for a connection.
        transport: an httpx transport for tests (e.g. `httpx.ASGITransport(app)`).
    """

    def __init__(
        self,
        base_url: str | Sequence[str] = "http://127.0.0.1:8000",
        *,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        max_connections: int = 256,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("give at least one base URL")
        self.base_urls = [url.rstrip("/") for url in urls]
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        self._next_replica: Iterator[str] = itertools.cycle(self.base_urls)
        self._replica_of: dict[str, str] = {}
        self._http = httpx.AsyncClient(
            timeout=self.timeouts.httpx(),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
            headers={"user-agent": "gym-server-trainer-client", **(headers or {})},
        )
        self.retries = 0  # how many retries this client has made (for summaries and tests)

    def __repr__(self) -> str:
        return f"GymClient({self.base_urls!r}, live={len(self._replica_of)})"

    async def __aenter__(self) -> GymClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- the request loop --------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        base_url: str | None = None,
        idempotent: bool = False,
        read_timeout_s: float | None = None,
    ) -> httpx.Response:
        """Send one request with the retry policy; returns a 2xx response or raises.

        Raises:
            GymUnavailable: 429 or 503 on every attempt.
            GymAPIError: any other 4xx/5xx answer (not retried: it would fail the same way).
            GymTransportError: no answer, after the retries that were safe.
        """
        url = (base_url or self.base_urls[0]) + path
        extra: dict[str, Any] = {}
        if read_timeout_s is not None:
            extra["timeout"] = httpx.Timeout(
                connect=self.timeouts.connect,
                read=read_timeout_s,
                write=self.timeouts.write,
                pool=self.timeouts.pool,
            )
        last_error: Exception | None = None
        for attempt in range(self.retry.attempts):
            try:
                response = await self._http.request(method, url, json=json, params=params, **extra)
            except _NOT_SENT as exc:
                last_error, retry_after = exc, None
            except _MAYBE_SENT as exc:
                if not idempotent:
                    raise GymTransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
                last_error, retry_after = exc, None
            except httpx.HTTPError as exc:
                raise GymTransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            else:
                if response.status_code < 400:
                    return response
                if response.status_code not in _RETRY_STATUSES:
                    raise GymAPIError(response.status_code, _problem(response), method, path)
                last_error, retry_after = (
                    GymUnavailable(response.status_code, _problem(response), method, path),
                    _retry_after(response),
                )
            if attempt + 1 < self.retry.attempts:
                self.retries += 1
                await asyncio.sleep(self.retry.delay(attempt, retry_after))
        if isinstance(last_error, GymAPIError):
            raise last_error
        raise GymTransportError(
            f"{method} {path}: no answer after {self.retry.attempts} attempts: {last_error!r}"
        ) from last_error

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self.request(method, path, **kwargs)).json()

    def _base(self, session_id: str) -> str:
        return self._replica_of.get(session_id, self.base_urls[0])

    # -- catalog -----------------------------------------------------------------------------------

    async def list_environments(self) -> list[EnvironmentInfo]:
        data = await self._json("GET", "/v1/environments", idempotent=True)
        return [EnvironmentInfo.from_json(item) for item in data["environments"]]

    async def get_environment(self, env: str) -> EnvironmentInfo:
        return EnvironmentInfo.from_json(await self._json("GET", f"/v1/environments/{env}", idempotent=True))

    async def tasks(
        self, env: str, *, split: str | None = None, offset: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        """One page of tasks (without answers): `{"total": ..., "tasks": [...]}`."""
        params: dict[str, Any] = {"offset": offset, "limit": limit}
        if split is not None:
            params["split"] = split
        return dict(await self._json("GET", f"/v1/environments/{env}/tasks", params=params, idempotent=True))

    async def all_tasks(
        self, env: str, *, split: str | None = None, page: int = 1000
    ) -> list[dict[str, Any]]:
        """Every task of a split, paging through the catalog."""
        found: list[dict[str, Any]] = []
        while True:
            chunk = await self.tasks(env, split=split, offset=len(found), limit=page)
            found.extend(chunk["tasks"])
            if not chunk["tasks"] or len(found) >= int(chunk["total"]):
                return found

    # -- sessions ----------------------------------------------------------------------------------

    async def create_session(
        self,
        env: str,
        *,
        task_id: str | None = None,
        task: dict[str, Any] | None = None,
        seed: int | None = None,
        ttl_s: float | None = None,
        run: str | None = None,
        policy: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        """Start an episode on the next replica. A 429 (at capacity) is retried after `Retry-After`."""
        body: dict[str, Any] = {"env": env}
        for key, value in (
            ("task_id", task_id),
            ("task", task),
            ("seed", seed),
            ("ttl_s", ttl_s),
            ("run", run),
            ("policy", policy),
            ("metadata", metadata),
        ):
            if value is not None:
                body[key] = value
        base = next(self._next_replica)
        data = await self._json("POST", "/v1/sessions", json=body, base_url=base)
        session = SessionInfo.from_json(data, base)
        self._replica_of[session.session_id] = base
        return session

    async def step(
        self, session_id: str, message: dict[str, Any], turn_data: dict[str, Any] | None = None
    ) -> StepResult:
        """Send one assistant message. Never re-sent after it may have reached the server."""
        body: dict[str, Any] = {"message": message}
        if turn_data is not None:
            body["turn_data"] = turn_data
        data = await self._json(
            "POST", f"/v1/sessions/{session_id}/step", json=body, base_url=self._base(session_id)
        )
        return StepResult.from_json(data)

    async def verify(self, session_id: str) -> VerifyResult:
        data = await self._json(
            "POST", f"/v1/sessions/{session_id}/verify", base_url=self._base(session_id), idempotent=True
        )
        return VerifyResult.from_json(data)

    async def get_session(self, session_id: str) -> dict[str, Any]:
        return dict(
            await self._json(
                "GET", f"/v1/sessions/{session_id}", base_url=self._base(session_id), idempotent=True
            )
        )

    async def close(self, session_id: str, *, failure: str | None = None) -> None:
        """Close a session (idempotent on the server, so retried freely).

        `failure` reports why the client gave up on the episode (`policy_error`, `policy_timeout`), so
        the stored trajectory says "no signal" instead of a plain `abandoned`.
        """
        base = self._base(session_id)
        params = {"failure": failure} if failure else None
        try:
            await self.request(
                "DELETE", f"/v1/sessions/{session_id}", base_url=base, params=params, idempotent=True
            )
        finally:
            self._replica_of.pop(session_id, None)

    # -- stateless scoring and stored rollouts -----------------------------------------------------

    async def verify_stateless(
        self,
        env: str,
        *,
        task_id: str | None = None,
        task: dict[str, Any] | None = None,
        seed: int | None = None,
        completion: str | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> VerifyResult:
        body = _verify_body(env, task_id, task, seed, completion, messages)
        return VerifyResult.from_json(await self._json("POST", "/v1/verify", json=body, idempotent=True))

    async def verify_batch(self, items: list[dict[str, Any]]) -> list[VerifyResult | dict[str, Any]]:
        """Score many `VerifyRequest` bodies; each entry is a result or that item's problem object."""
        data = await self._json("POST", "/v1/verify/batch", json={"items": items}, idempotent=True)
        return [
            VerifyResult.from_json(item["result"]) if item.get("result") else dict(item.get("error") or {})
            for item in data["results"]
        ]

    async def list_rollouts(self, **filters: Any) -> dict[str, Any]:
        params = {key: value for key, value in filters.items() if value is not None}
        return dict(await self._json("GET", "/v1/rollouts", params=params, idempotent=True))

    async def get_rollout(self, rollout_id: str) -> dict[str, Any]:
        return dict(await self._json("GET", f"/v1/rollouts/{rollout_id}", idempotent=True))

    async def wait_for_rollout(
        self, rollout_id: str, *, statuses: Sequence[str] | None = None, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        """Poll until the store holds a finished row for this id (the writer batches its writes)."""
        deadline = time.monotonic() + timeout_s
        wanted = set(statuses) if statuses else None
        while True:
            try:
                row = await self.get_rollout(rollout_id)
            except GymAPIError as exc:
                if exc.status != 404:
                    raise
                row = {}
            status = row.get("status")
            if status and (status in wanted if wanted else status != "live"):
                return row
            if time.monotonic() > deadline:
                raise GymTransportError(f"rollout {rollout_id} not stored as finished within {timeout_s} s")
            await asyncio.sleep(0.05)


def _verify_body(
    env: str,
    task_id: str | None,
    task: dict[str, Any] | None,
    seed: int | None,
    completion: str | None,
    messages: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"env": env}
    for key, value in (
        ("task_id", task_id),
        ("task", task),
        ("seed", seed),
        ("completion", completion),
        ("messages", messages),
    ):
        if value is not None:
            body[key] = value
    return body


class SyncGymClient:
    """The blocking twin of `GymClient`, for scripts and notebooks.

    It runs a `GymClient` on a private event loop in a daemon thread, so it also works inside a
    caller that already has a running loop (Jupyter), where `asyncio.run` would fail.
    """

    def __init__(self, base_url: str | Sequence[str] = "http://127.0.0.1:8000", **kwargs: Any) -> None:
        self._loop = BackgroundLoop()
        self.aclient: GymClient = self._loop.run(_build(base_url, kwargs))

    def __repr__(self) -> str:
        return f"Sync{self.aclient!r}"

    def __enter__(self) -> SyncGymClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_client()

    def close_client(self) -> None:
        if self._loop.running:
            self._loop.run(self.aclient.aclose())
            self._loop.stop()

    def _call(self, factory: Callable[[], Awaitable[T]]) -> T:
        async def runner() -> T:
            return await factory()

        return self._loop.run(runner())

    def list_environments(self) -> list[EnvironmentInfo]:
        return self._call(self.aclient.list_environments)

    def get_environment(self, env: str) -> EnvironmentInfo:
        return self._call(lambda: self.aclient.get_environment(env))

    def tasks(self, env: str, **kwargs: Any) -> dict[str, Any]:
        return self._call(lambda: self.aclient.tasks(env, **kwargs))

    def all_tasks(self, env: str, **kwargs: Any) -> list[dict[str, Any]]:
        return self._call(lambda: self.aclient.all_tasks(env, **kwargs))

    def create_session(self, env: str, **kwargs: Any) -> SessionInfo:
        return self._call(lambda: self.aclient.create_session(env, **kwargs))

    def step(
        self, session_id: str, message: dict[str, Any], turn_data: dict[str, Any] | None = None
    ) -> StepResult:
        return self._call(lambda: self.aclient.step(session_id, message, turn_data))

    def verify(self, session_id: str) -> VerifyResult:
        return self._call(lambda: self.aclient.verify(session_id))

    def get_session(self, session_id: str) -> dict[str, Any]:
        return self._call(lambda: self.aclient.get_session(session_id))

    def close(self, session_id: str, *, failure: str | None = None) -> None:
        self._call(lambda: self.aclient.close(session_id, failure=failure))

    def verify_stateless(self, env: str, **kwargs: Any) -> VerifyResult:
        return self._call(lambda: self.aclient.verify_stateless(env, **kwargs))

    def verify_batch(self, items: list[dict[str, Any]]) -> list[VerifyResult | dict[str, Any]]:
        return self._call(lambda: self.aclient.verify_batch(items))

    def list_rollouts(self, **filters: Any) -> dict[str, Any]:
        return self._call(lambda: self.aclient.list_rollouts(**filters))

    def get_rollout(self, rollout_id: str) -> dict[str, Any]:
        return self._call(lambda: self.aclient.get_rollout(rollout_id))


async def _build(base_url: str | Sequence[str], kwargs: dict[str, Any]) -> GymClient:
    # Built on the background loop so its connection pool belongs to that loop.
    return GymClient(base_url, **kwargs)
