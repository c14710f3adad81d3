"""`GymClient`: the async HTTP client of the gym, with the retry policy of `retry` applied once for all
calls, and sessions pinned to the replica that created them.

Behind `serve --ray` a create's 201 names the replica's own URL (`x-gym-replica-url`): the session's
steps go there directly, so the entry point's hop is paid on create and close only; a request that cannot
reach that URL falls back to the entry point, which answers 410 `session-lost` if the replica died."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any, TypedDict

import httpx

from gym_trainer.client.errors import (
    GymAPIError,
    GymTransportError,
    GymUnavailable,
    problem_of,
)
from gym_trainer.client.keys import gym_api_key
from gym_trainer.client.records import (
    EnvironmentInfo,
    ForkInfo,
    SessionInfo,
    StepResult,
    VerifyResult,
)
from gym_trainer.client.retry import (
    MAYBE_SENT,
    NOT_SENT,
    RETRY_STATUSES,
    RetryPolicy,
    Timeouts,
    never_read,
    retry_after,
)

__all__ = ["GymClient"]


class _Route(TypedDict):
    base_url: str
    fallback_url: str | None


def _present(**fields: Any) -> dict[str, Any]:
    """The fields that were given: the gym applies its own defaults to the rest."""
    return {key: value for key, value in fields.items() if value is not None}


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
        retry: the bounded retry policy for 429, 503 and requests that never reached the server.
        max_connections: pooled sockets per client; more concurrent requests queue for a connection.
        transport: an httpx transport for tests (e.g. `httpx.ASGITransport(app)`).
        headers: sent with every request.
        api_key: the gym's API key (`gym-server keys create`), sent as `Authorization: Bearer`; needed
            when the server requires keys (it binds a non-loopback address, or `GYM_AUTH__MODE=on`).
            Default: `$GYM_API_KEY` (unset: no key); an empty string sends none.
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
        api_key: str | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        api_key = gym_api_key(api_key)
        if not urls:
            raise ValueError("give at least one base URL")
        self.base_urls = [url.rstrip("/") for url in urls]
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        self._next_replica: Iterator[str] = itertools.cycle(self.base_urls)
        self._replica_of: dict[str, str] = {}  # session -> the base URL it was created through
        self._direct_of: dict[str, str] = {}  # session -> its replica's own URL, where the entry named one
        self._http = httpx.AsyncClient(
            timeout=self.timeouts.httpx(),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
            headers={
                "user-agent": "gym-server-trainer-client",
                **({"authorization": f"Bearer {api_key}"} if api_key else {}),
                **(headers or {}),
            },
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
        fallback_url: str | None = None,
        idempotent: bool = False,
    ) -> httpx.Response:
        """Send one request with the retry policy; returns a 2xx response or raises.

        `fallback_url`: where to send it instead once `base_url` cannot be reached (the request never
        arrived there), e.g. the entry point in front of a replica stepped directly.

        Raises:
            GymUnavailable: 429 or 503 on every attempt.
            GymAPIError: any other 4xx/5xx answer (not retried: it would fail the same way).
            GymTransportError: no answer, after the retries that were safe.
        """
        url = (base_url or self.base_urls[0]) + path
        last_error: Exception | None = None
        for attempt in range(self.retry.attempts):
            wait_hint: float | None = None
            try:
                response = await self._http.request(method, url, json=json, params=params)
            except NOT_SENT as exc:
                last_error = exc
                if fallback_url is not None:
                    url, fallback_url = fallback_url + path, None
                    continue  # the next attempt goes through the entry point, without waiting
            except MAYBE_SENT as exc:
                if not (idempotent or never_read(exc)):
                    raise GymTransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
                last_error = exc
            except httpx.HTTPError as exc:
                raise GymTransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            else:
                if response.status_code < 400:
                    return response
                if response.status_code not in RETRY_STATUSES:
                    raise GymAPIError(response.status_code, problem_of(response), method, path)
                last_error = GymUnavailable(response.status_code, problem_of(response), method, path)
                wait_hint = retry_after(response)
            if attempt + 1 < self.retry.attempts:
                self.retries += 1
                await asyncio.sleep(self.retry.delay(attempt, wait_hint))
        if isinstance(last_error, GymAPIError):
            raise last_error
        raise GymTransportError(
            f"{method} {path}: no answer after {self.retry.attempts} attempts: {last_error!r}"
        ) from last_error

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self.request(method, path, **kwargs)).json()

    def _base(self, session_id: str) -> str:
        return self._replica_of.get(session_id, self.base_urls[0])

    def _routed(self, session_id: str) -> _Route:
        """Where a session's step-level requests go: its replica directly if the entry point named one
        (with the entry point as the fallback), else where it was created."""
        direct = self._direct_of.get(session_id)
        if direct is None:
            return {"base_url": self._base(session_id), "fallback_url": None}
        return {"base_url": direct, "fallback_url": self._base(session_id)}

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
        params = _present(offset=offset, limit=limit, split=split)
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

    async def curriculum(self, env: str, *, split: str | None = None, **choice: Any) -> dict[str, Any]:
        """A split's tasks weighted by a policy's pass rates (`choice`: rule, policy, run, min_pass,
        max_pass, min_episodes, floor; see docs/curriculum.md). `fallback` says when it is uniform."""
        params = _present(split=split, **choice)
        return dict(
            await self._json("GET", f"/v1/environments/{env}/curriculum", params=params, idempotent=True)
        )

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
        body = _present(
            env=env,
            task_id=task_id,
            task=task,
            seed=seed,
            ttl_s=ttl_s,
            run=run,
            policy=policy,
            metadata=metadata,
        )
        base = next(self._next_replica)
        response = await self.request("POST", "/v1/sessions", json=body, base_url=base)
        session = SessionInfo.from_json(response.json(), base)
        self._replica_of[session.session_id] = base
        direct = response.headers.get("x-gym-replica-url")
        if direct:
            self._direct_of[session.session_id] = direct.rstrip("/")
        return session

    async def fork(
        self,
        session_id: str,
        turn: int,
        n: int = 1,
        *,
        ttl_s: float | None = None,
        run: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ForkInfo:
        """Fork the episode (live or stored) at `turn`: `n` live sessions in the state it had after that
        turn, each holding its messages up to there (docs/fork.md); all of them or none. The forks stay
        on the episode's replica. Like a step, never re-sent after it may have reached the server (a
        second request would open `n` more)."""
        body = _present(turn=turn, n=n, ttl_s=ttl_s, run=run, metadata=metadata)
        route = self._routed(session_id)
        response = await self.request("POST", f"/v1/sessions/{session_id}/fork", json=body, **route)
        base = self._base(session_id)
        forked = ForkInfo.from_json(response.json(), base)
        direct = self._direct_of.get(session_id)
        for fork in forked.forks:
            self._replica_of[fork.session_id] = base
            if direct is not None:
                self._direct_of[fork.session_id] = direct
        return forked

    async def step(
        self, session_id: str, message: dict[str, Any], turn_data: dict[str, Any] | None = None
    ) -> StepResult:
        """Send one assistant message. Never re-sent after it may have reached the server."""
        body = _present(message=message, turn_data=turn_data)
        data = await self._json(
            "POST", f"/v1/sessions/{session_id}/step", json=body, **self._routed(session_id)
        )
        return StepResult.from_json(data)

    async def record_truncated_turn(
        self, session_id: str, content: str, turn_data: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Store a turn cut at the token budget (`truncated: true` in the trajectory's `turns`) without
        stepping the environment; no step may follow it. Returns `{"turns", "failure"}`. Like a step,
        never re-sent after it may have reached the server."""
        body = _present(content=content, turn_data=turn_data)
        return dict(
            await self._json(
                "POST",
                f"/v1/sessions/{session_id}/truncated-turn",
                json=body,
                **self._routed(session_id),
            )
        )

    async def verify(self, session_id: str) -> VerifyResult:
        data = await self._json(
            "POST", f"/v1/sessions/{session_id}/verify", idempotent=True, **self._routed(session_id)
        )
        return VerifyResult.from_json(data)

    async def get_session(self, session_id: str) -> dict[str, Any]:
        return dict(
            await self._json("GET", f"/v1/sessions/{session_id}", idempotent=True, **self._routed(session_id))
        )

    async def close(self, session_id: str, *, failure: str | None = None) -> None:
        """Close a session (idempotent on the server, so retried freely).

        `failure` reports why the client gave up on the episode (`policy_error`, `policy_timeout`), so
        the stored trajectory says "no signal" instead of a plain `abandoned`. Sent where the session was
        created, never to its replica directly, so the `serve --ray` entry point forgets the session.
        """
        base = self._base(session_id)
        try:
            await self.request(
                "DELETE",
                f"/v1/sessions/{session_id}",
                base_url=base,
                params={"failure": failure} if failure else None,
                idempotent=True,
            )
        finally:
            self._replica_of.pop(session_id, None)
            self._direct_of.pop(session_id, None)

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
        body = _present(
            env=env, task_id=task_id, task=task, seed=seed, completion=completion, messages=messages
        )
        return VerifyResult.from_json(await self._json("POST", "/v1/verify", json=body, idempotent=True))

    async def verify_batch(self, items: list[dict[str, Any]]) -> list[VerifyResult | dict[str, Any]]:
        """Score many `VerifyRequest` bodies; each entry is a result or that item's problem object."""
        data = await self._json("POST", "/v1/verify/batch", json={"items": items}, idempotent=True)
        return [
            VerifyResult.from_json(item["result"]) if item.get("result") else dict(item.get("error") or {})
            for item in data["results"]
        ]

    # -- the rollout buffer (docs/rollout-buffer.md) ------------------------------------------------

    async def announce_version(self, run: str, version: int, **shape: Any) -> dict[str, Any]:
        """Announce the policy version now served (`shape`: `policy`, `max_staleness`, `groups_per_step`);
        a repeat is harmless, so a lost answer is retried."""
        body = {"version": version, **_present(**shape)}
        return dict(await self._json("POST", f"/v1/policy-runs/{run}/versions", json=body, idempotent=True))

    async def admit_group(
        self, run: str, size: int, *, env: str | None = None, task_id: str | None = None, wait_s: float = 0.0
    ) -> dict[str, Any]:
        """Ask to play one group: `{group_id, version, metadata}`; the gym waits up to `wait_s` for room;
        `GymUnavailable` (429) while the buffer stays full, after the retry policy's waits."""
        body = {"size": size, "wait_s": wait_s, **_present(env=env, task_id=task_id)}
        return dict(await self._json("POST", f"/v1/policy-runs/{run}/groups", json=body))

    async def pull_groups(
        self, run: str, *, max_groups: int, min_groups: int = 1, lease_s: float = 300.0, wait_s: float = 0.0
    ) -> dict[str, Any]:
        """Lease complete, scored groups within the run's bound; an answer lost on the way leaves a
        lease that expires and hands its groups out again (at-least-once)."""
        body = {"max_groups": max_groups, "min_groups": min_groups, "lease_s": lease_s, "wait_s": wait_s}
        return dict(await self._json("POST", f"/v1/policy-runs/{run}/pull", json=body))

    async def acknowledge(self, run: str, lease_id: str) -> dict[str, Any]:
        """Consume a lease's groups (idempotent)."""
        body = {"lease_id": lease_id}
        return dict(await self._json("POST", f"/v1/policy-runs/{run}/acks", json=body, idempotent=True))

    async def list_rollouts(self, **filters: Any) -> dict[str, Any]:
        return dict(await self._json("GET", "/v1/rollouts", params=_present(**filters), idempotent=True))

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
