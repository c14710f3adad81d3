"""The session manager: owns every live episode, from creation to the trajectory it leaves behind.

This module is the lifecycle (create, step, verify, close, expiry, shutdown); what a live session holds
is in `sessions.live`, its budgets in `sessions.budgets`, the row it becomes in `sessions.trajectory`.

Invariants it keeps:
- one environment instance per session; steps (and verifies) on one session are serialized by its
  lock, while different sessions run concurrently;
- every session that was ever created leaves exactly one trajectory row, whatever ends it (close,
  expiry, a budget, an environment crash, server shutdown); a row is written at creation (status
  `live`) so even a killed server is found out at the next start, and `live` rows are refreshed by
  the reaper's snapshots, never by a per-step database round trip;
- a closed or expired id answers 410 for `tombstone_s`, then 404 like an id never seen;
- a 2xx follows the commit of the row it promises, never a refusal: a create whose row the store does
  not commit ends its session (the sandbox goes back) and answers 503; a close whose final row is
  refused answers 503, and closing it again writes that row again (`RecordSink.committed`), so a close
  answers 204 only once the row is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Protocol

from gym_server.auth.context import current_tenant
from gym_server.auth.quotas import TenantQuotas
from gym_server.core import jsontext
from gym_server.core.errors import (
    AtCapacity,
    GymError,
    InvalidRequest,
    SessionExpired,
    SessionFinished,
    SessionNotFound,
    StoreRefused,
    StoreUnavailable,
)
from gym_server.core.settings import Settings
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.registry import EnvironmentEntry, Registry
from gym_server.sdk.tasks import Task
from gym_server.sessions.budgets import apply_budgets, charge_bytes
from gym_server.sessions.catalog import CatalogRescan
from gym_server.sessions.deadlines import run_verifier, step_with_deadline
from gym_server.sessions.fork import (
    ForkSource,
    ForkUnavailable,
    build_forks,
    close_environments,
    fork_metadata,
)
from gym_server.sessions.live import LiveSession, StepResult
from gym_server.sessions.metrics import SessionMetrics
from gym_server.sessions.task_choice import choose_and_compare
from gym_server.sessions.trajectory import trajectory_record
from gym_server.store.records import (
    DEFAULT_TENANT,
    FAILURE_DETAIL_KEY,
    INLINE_TASK_KEY,
    FailureClass,
    TrajectoryRecord,
    TrajectoryStatus,
    utcnow,
)
from gym_server.store.storable import check_episode

__all__ = ["RecordSink", "SessionManager"]

log = logging.getLogger(__name__)

# The `turns` entries the server writes itself (an episode gateway's call records, `record_turn`) say
# where they came from under this key. A client's turn data may not carry it, so no step or truncated
# turn can pass for the server's records: `GET /v1/rollouts/{id}/samples` serves gateway records as
# token-exact samples (issue 37).
SERVER_TURN_KEY = "source"


def _refuse_server_key(turn_data: dict[str, Any] | None) -> None:
    if turn_data and SERVER_TURN_KEY in turn_data:
        raise InvalidRequest(
            f"turn_data may not hold {SERVER_TURN_KEY!r}: the server marks the turn records it writes itself "
            "(an episode gateway's calls) with it"
        )


class RecordSink(Protocol):
    """Where finished and snapshotted trajectories go (the store's batching writer)."""

    def record(self, record: TrajectoryRecord) -> None: ...

    async def committed(self, trajectory_id: str) -> None: ...

    def forget(self, trajectory_id: str) -> None: ...


class SessionManager:
    """Creates, steps, verifies and closes sessions; the API and the CLI both call it."""

    def __init__(
        self,
        registry: Registry,
        sink: RecordSink,
        settings: Settings,
        metrics: SessionMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        quotas: TenantQuotas | None = None,
    ) -> None:
        self.registry = registry
        # Environments installed after start-up, found on the first create that names one.
        self.catalog = CatalogRescan(registry)
        self.sink = sink
        self.settings = settings
        self.metrics = metrics or SessionMetrics()
        self._clock = clock
        self.quotas = quotas
        self._live: dict[str, LiveSession] = {}
        # id -> (when, how, tenant), for 410 answers (to its own tenant only)
        self._gone: dict[str, tuple[float, str, str]] = {}
        self._creating = 0
        self._closing: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"SessionManager(live={len(self._live)}, max={self.settings.sessions.max_sessions})"

    @property
    def live_count(self) -> int:
        return len(self._live)

    def live_by_env(self, tenant: str | None = None) -> dict[str, int]:
        """Open sessions per environment name (the inspector's live page), of `tenant` alone if given."""
        sessions = self._live.values()
        return dict(Counter(s.entry.name for s in sessions if tenant is None or s.tenant == tenant))

    # -- lifecycle ---------------------------------------------------------------------------------

    async def create(
        self,
        env: str,
        *,
        task_id: str | None = None,
        task: Task | dict[str, Any] | None = None,
        seed: int | None = None,
        split: str | None = None,
        ttl_s: float | None = None,
        run: str | None = None,
        policy: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> LiveSession:
        self._check_capacity(1)
        self._check_ttl(ttl_s)
        entry = self.registry.get(env) if env in self.registry else await self.catalog.entry(env)
        tenant = current_tenant.get() or DEFAULT_TENANT
        with self._admitted(1, tenant):
            # In a thread: a generated dataset makes the task now (reasoning-gym's generators are CPU work,
            # and a level not yet used builds its generator), which the shared event loop must not run.
            # A named task of a loaded JSONL dataset is a dict lookup: no thread hop on the hot path.
            known = entry.dataset.indexed(task_id) if task_id is not None and task is None else None
            if known is not None:
                chosen, inline = known, False
            else:
                chosen, seed, inline = await asyncio.to_thread(
                    choose_and_compare, entry, task_id=task_id, task=task, split=split, seed=seed
                )
            check_episode(run=run, task_id=chosen.id, policy=policy, metadata=metadata)
            metadata = dict(metadata or {})
            metadata.pop(INLINE_TASK_KEY, None)
            if inline:
                metadata[INLINE_TASK_KEY] = chosen.model_dump(mode="json")
            instance = await self._start_env(entry, chosen, seed)
            opened = await self._opened(entry, [instance])
        session = self._register(opened[0], entry, tenant, ttl_s, run, policy, metadata)
        await self._acknowledge_opened([session])
        return session

    async def fork(
        self,
        source: ForkSource,
        turn: int,
        count: int,
        *,
        live: LiveSession | None = None,
        ttl_s: float | None = None,
        run: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LiveSession]:
        """Open `count` live sessions in the state `source` was in after `turn` (`sessions.fork`); all of
        them, acknowledged, or none and nothing left running. `live` is the source's session when it is
        live (a copy-mode environment at its current turn is copied from it rather than replayed).

        Each fork is a session like any other (capacity, the tenant's quota, budgets, its own row) whose
        row names its lineage; it keeps the source's run and policy unless `run` is given.

        Raises:
            InvalidRequest: `turn` beyond the episode or one that ended it, `count` over `max_forks`.
            ForkUnavailable: the environment does not fork (`ForkMode.NONE`).
            ForkDiverged: the replay did not reproduce the recording.
        """
        limit = self.settings.sessions.max_forks
        if not 1 <= count <= limit:
            raise InvalidRequest(
                f"n={count}: a fork request opens 1..{limit} sessions (GYM_SESSIONS__MAX_FORKS)"
            )
        source.check_turn(turn)
        entry = source.entry
        if entry.cls.fork_mode is ForkMode.NONE:
            raise ForkUnavailable(
                source.id, f"environment {entry.name!r} does not fork (its fork_mode is none)"
            )
        self._check_capacity(count)
        self._check_ttl(ttl_s)
        run = source.run if run is None else run
        check_episode(run=run, task_id=source.task.id, policy=source.policy)
        metadata = fork_metadata(source, metadata)
        tenant = current_tenant.get() or DEFAULT_TENANT
        with self._admitted(count, tenant):
            start = partial(self._start_env, entry, source.task, source.seed)
            instances = await build_forks(source, turn, count, start, self.settings.limits, live)
            opened = await self._opened(entry, instances)
            if instances[0].done:
                await self._close_all(instances)
                raise InvalidRequest(
                    f"turn {turn} ended episode {source.id!r} ({instances[0].done_reason}): a fork must be "
                    f"able to take a next turn, fork at 0..{turn - 1}"
                )
        sessions = [
            self._register(item, entry, tenant, ttl_s, run, source.policy, metadata, (source.id, turn))
            for item in opened
        ]
        await self._acknowledge_opened(sessions)
        return sessions

    def _check_capacity(self, count: int) -> None:
        limits = self.settings.sessions
        if len(self._live) + self._creating + count > limits.max_sessions:
            self.metrics.rejected.inc()
            raise AtCapacity(limits.max_sessions, limits.retry_after_s)

    def _check_ttl(self, ttl_s: float | None) -> None:
        limits = self.settings.sessions
        if ttl_s is not None and ttl_s > limits.max_ttl_s:
            raise InvalidRequest(f"ttl_s={ttl_s:g} is over this server's maximum of {limits.max_ttl_s:g} s")

    @contextlib.contextmanager
    def _admitted(self, count: int, tenant: str) -> Iterator[None]:
        """Hold `count` places (in the capacity and the tenant's quota) while sessions start: released
        when starting fails; on success `_register` turns each into a live session."""
        reserved = 0
        try:
            if self.quotas is not None:
                for _ in range(count):
                    self.quotas.reserve_session(tenant)
                    reserved += 1
            self._creating += count
            try:
                yield
            finally:
                self._creating -= count
        except BaseException:
            if self.quotas is not None:
                for _ in range(reserved):
                    self.quotas.unreserve(tenant)
            raise

    async def _opened(
        self, entry: EnvironmentEntry, instances: list[Environment]
    ) -> list[tuple[Environment, list[dict[str, Any]], int]]:
        """Each started environment with what its session needs from it (tools, transcript bytes); if
        that fails, every environment (and the sandbox it holds) goes back now, since no session will
        ever own it."""
        try:
            # In a thread: n transcripts of up to megabytes each are measured (the event-loop guard's case).
            return await asyncio.to_thread(
                lambda: [
                    (instance, instance.tools(), len(jsontext.dumps(instance.messages)))
                    for instance in instances
                ]
            )
        except BaseException:
            await self._close_all(instances)
            raise

    async def _close_all(self, instances: list[Environment]) -> None:
        await asyncio.shield(close_environments(instances, self.settings.limits.tool_timeout_s))

    def _register(
        self,
        opened: tuple[Environment, list[dict[str, Any]], int],
        entry: EnvironmentEntry,
        tenant: str,
        ttl_s: float | None,
        run: str | None,
        policy: dict[str, Any] | None,
        metadata: dict[str, Any],
        parent: tuple[str, int] | None = None,
    ) -> LiveSession:
        """A started environment as a live session, its `live` row handed to the store."""
        instance, tools, transcript_bytes = opened
        limits = self.settings
        session = LiveSession(
            id=uuid.uuid4().hex,
            entry=entry,
            env=instance,
            ttl_s=ttl_s or limits.sessions.default_ttl_s,
            run=run,
            policy=policy,
            metadata=metadata,
            created_at=utcnow(),
            tools=tools,
            max_turns=min(entry.cls.max_turns or limits.limits.max_turns, limits.limits.max_turns),
            last_active=self._clock(),
            tenant=tenant,
            parent_id=parent[0] if parent else None,
            parent_turn=parent[1] if parent else None,
        )
        if self.quotas is not None:
            self.quotas.opened(tenant, session.id)
        session.transcript_bytes = transcript_bytes
        self._live[session.id] = session
        self.sink.record(trajectory_record(session, TrajectoryStatus.LIVE, self.settings.server_name))
        self.metrics.created.labels(entry.name).inc()
        self.metrics.live.set(len(self._live))
        return session

    async def _acknowledge_opened(self, sessions: list[LiveSession]) -> None:
        """Return once every new session's row is committed: the 201 promises the episodes are on record,
        so a server killed right after it still leaves the rows that the next start marks lost."""
        try:
            for session in sessions:
                await self._acknowledge(session.id)
        except StoreUnavailable as exc:
            # The client gets no id, so nobody could close these sessions: they must not hold their
            # sandboxes until the TTL. Their rows (if the database takes them later) say why they ended.
            for session in sessions:
                session.failure = FailureClass.STORE_ERROR
                await self._finish(
                    session, TrajectoryStatus.FAILED, "could not be stored when it was created"
                )
            why = (
                "the database refused it" if isinstance(exc, StoreRefused) else "the database is slow or down"
            )
            raise type(exc)(f"no session was created, its trajectory could not be stored ({why})") from None
        except BaseException:
            # Anything else (the request cancelled, an unexpected error): the client never learns the ids,
            # so nobody could close the sessions; they end now rather than holding sandboxes until the TTL.
            for session in sessions:
                await asyncio.shield(
                    self._finish(session, TrajectoryStatus.ABANDONED, "its create did not complete")
                )
            raise

    async def _start_env(self, entry: EnvironmentEntry, task: Task, seed: int | None) -> Environment:
        timeout_s = self.settings.limits.tool_timeout_s
        try:
            instance = entry.cls(task, seed)
            try:
                # A deadline on this task, not `wait_for`'s new task per call: create, close and verify
                # are on every episode's path.
                async with asyncio.timeout(timeout_s):
                    await instance.reset()
            except BaseException:
                # What reset() took before it failed (an admitted sandbox) goes back.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(instance.close(), timeout_s)
                raise
        except GymError:
            raise
        except Exception as exc:
            log.exception("environment %s failed to start task %s", entry.name, task.id)
            raise GymError(
                f"environment {entry.name!r} failed to start task {task.id!r}: {type(exc).__name__}"
            ) from exc
        return instance

    def is_live(self, session_id: str) -> bool:
        """Whether `session_id` is a live session (no expiry check: the reaper's or a step's job)."""
        return session_id in self._live

    def owned(self, session_id: str) -> bool:
        """False when `session_id` is another tenant's live or recently closed session (the request's
        tenant, see `gym_server.auth.context`); True otherwise, unknown ids included (nothing to hide)."""
        tenant = current_tenant.get()
        if tenant is None:
            return True
        live = self._live.get(session_id)
        if live is not None:
            return live.tenant == tenant
        gone = self._gone.get(session_id)
        return gone is None or gone[2] == tenant

    def get(self, session_id: str) -> LiveSession:
        """The live session, or 404 (never seen, or another tenant's) / 410 (closed or expired)."""
        tenant = current_tenant.get()
        session = self._live.get(session_id)
        if session is None:
            gone = self._gone.get(session_id)
            if gone is not None and tenant in (None, gone[2]):
                raise SessionExpired(session_id, gone[1])
            raise SessionNotFound(session_id)
        if tenant is not None and session.tenant != tenant:
            raise SessionNotFound(session_id)
        return session

    async def step(
        self, session_id: str, message: dict[str, Any], turn_data: dict[str, Any] | None = None
    ) -> StepResult:
        _refuse_server_key(turn_data)
        session = self._touch(session_id)
        async with session.lock:
            self._check_open(session)
            started = time.perf_counter()
            try:
                outcome = await step_with_deadline(session.env, message, self.settings.limits)
                replies, info = outcome.messages, outcome.info
            except Exception as exc:
                # An environment bug ends this episode with a failure class; the server goes on.
                log.exception("environment %s crashed in step", session.entry.name)
                session.failure = FailureClass.ENV_ERROR
                session.env.finish("env_error")
                replies, info = [], {"error": f"environment error: {type(exc).__name__}"}
            if turn_data:
                session.turn_data.append(turn_data)
            apply_budgets(session, message, replies, turn_data, self.settings.limits.max_transcript_bytes)
            elapsed_ms = (time.perf_counter() - started) * 1000
            session.step_ms.append(round(elapsed_ms, 3))
            session.last_active = self._clock()
            session.dirty = True
            self.metrics.observe_step(session.entry.name, elapsed_ms / 1000)
            reward = None
            if session.env.done:
                try:
                    reward = (await self._verify_locked(session)).reward
                except AtCapacity as exc:  # the step is applied: answer it, and leave the score for later
                    info["verify_deferred"] = exc.detail
                info["done_reason"] = session.env.done_reason
            if session.failure:
                info["failure"] = session.failure
            return StepResult(messages=replies, done=session.env.done, reward=reward, info=info)

    def _check_open(self, session: LiveSession) -> None:
        if session.env.done:
            raise SessionFinished(session.id, session.env.done_reason or "done")
        if session.truncated:
            # The cut turn never reached the environment, so no later turn could follow it in the
            # token sequence the trainer holds.
            raise SessionFinished(session.id, "a truncated turn ended it")

    async def record_truncated_turn(
        self, session_id: str, content: str, turn_data: dict[str, Any] | None = None
    ) -> tuple[int, str | None]:
        """Store a turn the client cut at its own budget, without stepping the environment.

        The environment (and so its verifier) never sees `content`: the episode is scored on the state
        its stepped turns left. The turn ends the episode for steps (409 afterwards); verify and close
        work as before. Returns how many turn records the trajectory holds now, and the session's
        failure class (the text may cross the transcript budget, as a step's message may).
        """
        _refuse_server_key(turn_data)
        session = self._touch(session_id)
        async with session.lock:
            self._check_open(session)
            session.truncated = True
            record = {**(turn_data or {}), "content": content, "truncated": True}
            session.turn_data.append(record)
            charge_bytes(session, len(jsontext.dumps(record)), self.settings.limits.max_transcript_bytes)
            session.last_active = self._clock()
            session.dirty = True
            return len(session.turn_data), session.failure

    async def record_turn(
        self, session_id: str, record: dict[str, Any], metadata: dict[str, Any] | None = None
    ) -> int:
        """Append a turn record made outside the environment (an episode gateway's model call) to the
        trajectory's `turns`, charged to the transcript budget like a step's turn data, and merge
        `metadata` into the episode's. The environment is not stepped. Returns the records held now.

        The charge comes first: a record that would take the transcript past its budget is not kept
        (a gateway's record is the upstream's answer, whose size nobody bounded before it was kept,
        issue 37); the episode ends there with failure `max_transcript_bytes`.

        Raises:
            SessionFinished: the record was over the budget.
        """
        session = self._touch(session_id)
        async with session.lock:
            size = len(jsontext.dumps(record))
            limit = self.settings.limits.max_transcript_bytes
            if session.transcript_bytes + size > limit:
                charge_bytes(session, size, limit)
                raise SessionFinished(session.id, FailureClass.MAX_TRANSCRIPT_BYTES)
            session.turn_data.append(record)
            if metadata:
                session.metadata = {**session.metadata, **metadata}
            charge_bytes(session, size, limit)
            session.dirty = True
            return len(session.turn_data)

    async def answer(self, session_id: str, text: str) -> VerifyResult:
        """End the episode on a final answer given outside the environment's tools, score it, and close
        it (the 2xx follows the commit of its row, as a close's does).

        An open episode is stepped with `text` as a plain assistant message (the environment's final
        answer); one that asks for more after it (a simulated user) is ended there (`answered`). An
        episode already done is scored as it stands and `text` is not used.
        """
        session = self._touch(session_id)
        if not session.env.done and not session.truncated:
            await self.step(session_id, {"role": "assistant", "content": text})
        async with session.lock:
            session.env.finish("answered")
            result = await self._verify_locked(session)
        await self.close(session_id)
        return result

    async def verify(self, session_id: str) -> VerifyResult:
        session = self._touch(session_id)
        async with session.lock:
            return await self._verify_locked(session)

    async def _verify_locked(self, session: LiveSession) -> VerifyResult:
        if session.verified is not None and session.verified_at_len == len(session.env.messages):
            return session.verified
        result = await run_verifier(session.env, self.settings.limits.verify_timeout_s)
        session.verified, session.verified_at_len, session.dirty = result, len(session.env.messages), True
        return result

    async def close(self, session_id: str, failure: str | None = None, detail: str | None = None) -> None:
        """Close a session; closing an already closed or expired one is a no-op (idempotent DELETE).

        `failure` is the client's reason for giving up (e.g. `policy_error`): the episode is then stored
        as failed with that class, unless the server already recorded one. `detail` is that failure's
        cause in words (the gateway's "the upstream ... is unreachable: connection refused"), stored as
        `metadata.failure_detail` with it: a class alone does not tell a policy server that was not up
        yet from one that broke.
        """
        try:
            session = self.get(session_id)
        except SessionExpired:
            await self._acknowledge(session_id)  # a retried close confirms what the first could not
            return
        async with session.lock:
            if failure and detail and not session.failure:
                session.metadata[FAILURE_DETAIL_KEY] = detail
            session.failure = session.failure or failure
            done = session.env.done
            status = (
                TrajectoryStatus.COMPLETED if done and not session.failure else TrajectoryStatus.ABANDONED
            )
            if session.failure:
                status = TrajectoryStatus.FAILED
            await self._finish(session, status, "was closed")
        await self._acknowledge(session_id)

    async def _acknowledge(self, session_id: str) -> None:
        """Return once the trajectory's newest record is committed: what a 2xx on a write promises.

        Raises:
            StoreUnavailable: not committed within `store.commit_timeout_s` (the record stays queued and
                is written when the database is back; repeating the request confirms it).
            StoreRefused: the database refused the record (repeating the request writes it again).
        """
        timeout_s = self.settings.store.commit_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                await self.sink.committed(session_id)
        except StoreRefused as exc:
            raise StoreRefused(
                f"{exc.detail}; it is not stored: repeating the request writes it again"
            ) from None
        except TimeoutError:
            raise StoreUnavailable(
                f"trajectory {session_id!r} is not committed after {timeout_s:g} s (the database is slow or "
                "down); it stays queued and is written when the database answers: repeat the request to "
                "confirm"
            ) from None

    async def _finish(self, session: LiveSession, status: TrajectoryStatus, how: str) -> None:
        if self._live.pop(session.id, None) is None:
            return
        self._forget(session, how)
        # Recorded before the environment closes (its sandbox may take a while), so a read in between
        # finds the final record, never the last snapshot.
        self.sink.record(trajectory_record(session, status, self.settings.server_name, finished=True))
        try:
            async with asyncio.timeout(self.settings.limits.tool_timeout_s):
                await session.env.close()
        except Exception:
            log.exception("environment %s failed to close session %s", session.entry.name, session.id)
        self.metrics.closed.labels(session.entry.name, status.value).inc()
        self.metrics.live.set(len(self._live))

    def _touch(self, session_id: str) -> LiveSession:
        session = self.get(session_id)
        if session.is_idle_expired(self._clock()) and not session.lock.locked():
            # Expired but not yet reaped: answer as the reaper would have, then let it clean up.
            self._live.pop(session_id)
            self._forget(session, "expired after its idle TTL")
            session.failure = session.failure or FailureClass.EXPIRED
            self.sink.record(
                trajectory_record(session, TrajectoryStatus.EXPIRED, self.settings.server_name, finished=True)
            )
            self.metrics.closed.labels(session.entry.name, TrajectoryStatus.EXPIRED.value).inc()
            self.metrics.live.set(len(self._live))
            closing = asyncio.get_running_loop().create_task(self._close_quietly(session))
            self._closing.add(closing)  # the loop keeps only weak references to tasks
            closing.add_done_callback(self._closing.discard)
            raise SessionExpired(session_id)
        session.last_active = self._clock()
        return session

    def _forget(self, session: LiveSession, how: str) -> None:
        """Book keeping for a session just taken out of the live table."""
        self._gone[session.id] = (self._clock(), how, session.tenant)
        if self.quotas is not None:
            self.quotas.ended(session.tenant, session.id)

    async def _close_quietly(self, session: LiveSession) -> None:
        try:
            await asyncio.wait_for(session.env.close(), self.settings.limits.tool_timeout_s)
        except Exception:
            log.exception("environment %s failed to close session %s", session.entry.name, session.id)

    # -- background work (called by the reaper) ---------------------------------------------------

    async def reap_expired(self) -> int:
        """Close every session idle past its TTL; returns how many were reaped."""
        now = self._clock()
        expired = [s for s in self._live.values() if s.is_idle_expired(now) and not s.lock.locked()]
        for session in expired:
            session.failure = session.failure or FailureClass.EXPIRED
            await self._finish(session, TrajectoryStatus.EXPIRED, "expired after its idle TTL")
        horizon = now - self.settings.sessions.tombstone_s
        ended = []
        for gone_id, (when, _, _) in self._gone.items():
            if when >= horizon:
                break  # tombstones are kept in the order their sessions went: the rest are younger
            ended.append(gone_id)
        for gone_id in ended:
            del self._gone[gone_id]
            self.sink.forget(gone_id)  # the id answers 404 now: nobody can ask for its row again
        return len(expired)

    def snapshot_dirty(self) -> int:
        """Hand the store a fresh `live` copy of every session stepped since the last snapshot."""
        count = 0
        for session in self._live.values():
            if session.dirty:
                session.dirty = False
                self.sink.record(trajectory_record(session, TrajectoryStatus.LIVE, self.settings.server_name))
                count += 1
        return count

    async def shutdown(self) -> int:
        """Record every live session as lost (server shutdown) and close its environment."""
        sessions = list(self._live.values())
        for session in sessions:
            session.failure = FailureClass.SERVER_SHUTDOWN
            await self._finish(session, TrajectoryStatus.LOST, "was lost when the server stopped")
        await asyncio.gather(*self._closing, return_exceptions=True)
        return len(sessions)
