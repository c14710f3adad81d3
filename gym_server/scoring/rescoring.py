"""Re-scoring stored trajectories with the verifier the server runs *now*, without re-generating them.

A verifier gets fixed (a loose check, a wrong label); the trajectories it scored stay in the store. This
replays each stored transcript's assistant turns through a fresh instance of the current environment
(`sessions.replay.verify_transcript`, the same engine a live session and `POST /v1/verify` use, so tool
results are recomputed rather than trusted), with the trajectory's own task and seed, and stores the new
score beside the old one (`TrajectoryStore.add_rescore`): the rescore row keeps the reward and verifier
version it replaced, the trajectory's current score becomes the new one.

What cannot be re-scored, and why (each a `CannotRescore`, HTTP 409):
- the trajectory is still `live`: its session would overwrite the new score when it next writes;
- its environment is no longer installed;
- its task id is not in the environment's dataset any more (the dataset changed under it).

`Rescorer.rescore_many` walks every stored row matching a run/env filter for `gym-server reverify`,
reporting progress, skipping what cannot be re-scored, and summing up the changes (`RescoreSummary`).
"""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gym_server.core.errors import EnvironmentNotFound, GymError, RolloutNotFound, StoreUnavailable
from gym_server.core.settings import LimitSettings
from gym_server.sdk.registry import EnvironmentEntry, Registry
from gym_server.sdk.tasks import Task
from gym_server.sessions.replay import stored_task, verify_transcript
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.writer import TrajectoryStore

__all__ = ["CannotRescore", "EnvSummary", "RescoreOutcome", "RescoreSummary", "Rescorer"]

PAGE_SIZE = 500
FLUSH_TIMEOUT_S = 30.0
CHANGE_TOLERANCE = 1e-9  # rewards closer than this count as unchanged (float noise, not a new verdict)


class CannotRescore(GymError):
    """The rollout exists but cannot be replayed against the current environment."""

    status = 409
    slug = "cannot-rescore"
    title = "Cannot re-score"

    def __init__(self, rollout_id: str, reason: str, **extra: Any) -> None:
        super().__init__(
            f"rollout {rollout_id!r} cannot be re-scored: {reason}", rollout_id=rollout_id, **extra
        )
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RescoreOutcome:
    """The old and the new score of one trajectory, with both verifier versions."""

    rollout_id: str
    run: str | None
    env: str
    task_id: str
    previous_reward: float | None
    previous_verifier_version: str | None
    reward: float
    components: dict[str, float]
    failure: str | None
    verifier_version: str
    env_version: str
    rescored_at: datetime
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def delta(self) -> float | None:
        """New minus old reward; None when the trajectory had no score before."""
        return None if self.previous_reward is None else self.reward - self.previous_reward

    @property
    def changed(self) -> bool:
        """Whether the reward differs from the stored one (a first score counts as a change)."""
        delta = self.delta
        return delta is None or abs(delta) > CHANGE_TOLERANCE


@dataclass(slots=True)
class EnvSummary:
    """Counts of one environment's re-scores (or of all of them)."""

    rescored: int = 0
    changed: int = 0
    up: int = 0
    down: int = 0
    failed: int = 0  # the new verdict carries a failure class (no training signal)
    skipped: int = 0  # could not be re-scored (live, environment or task gone)
    delta_sum: float = 0.0
    deltas: int = 0

    @property
    def mean_delta(self) -> float | None:
        return self.delta_sum / self.deltas if self.deltas else None

    def add(self, outcome: RescoreOutcome) -> None:
        self.rescored += 1
        self.changed += outcome.changed
        self.failed += outcome.failure is not None
        delta = outcome.delta
        if delta is not None:
            self.delta_sum += delta
            self.deltas += 1
            self.up += delta > CHANGE_TOLERANCE
            self.down += delta < -CHANGE_TOLERANCE


@dataclass(slots=True)
class RescoreSummary:
    """What `rescore_many` did: per environment, in total, and why rows were skipped."""

    by_env: dict[str, EnvSummary] = field(default_factory=dict)
    total: EnvSummary = field(default_factory=EnvSummary)
    outcomes: list[RescoreOutcome] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (rollout id, reason)

    def add(self, outcome: RescoreOutcome) -> None:
        self.by_env.setdefault(outcome.env, EnvSummary()).add(outcome)
        self.total.add(outcome)
        self.outcomes.append(outcome)

    def skip(self, record: TrajectoryRecord, reason: str) -> None:
        self.by_env.setdefault(record.env, EnvSummary()).skipped += 1
        self.total.skipped += 1
        self.skipped.append((record.id, reason))


class Rescorer:
    """Re-scores stored trajectories against the environments in `registry`.

    Args:
        registry: the environments as they are now (the server's own registry).
        store: a started `TrajectoryStore`.
        limits: the replay budgets (tool and verify timeouts, max turns), as for stateless verification.
    """

    def __init__(self, registry: Registry, store: TrajectoryStore, limits: LimitSettings) -> None:
        self.registry = registry
        self.store = store
        self.limits = limits

    def __repr__(self) -> str:
        return f"Rescorer(envs={len(self.registry)}, store={self.store!r})"

    async def rescore(self, rollout_id: str) -> RescoreOutcome:
        """Re-score one stored trajectory and store the result beside the old score.

        Raises:
            RolloutNotFound: no trajectory has this id.
            CannotRescore: it is live, or its environment or task is gone.
            StoreUnavailable: the database does not answer.
        """
        record = await self.store.get(rollout_id)
        if record is None:
            raise RolloutNotFound(rollout_id)
        return await self._rescore(record)

    async def rescore_many(
        self,
        *,
        run: str | None = None,
        env: str | None = None,
        limit: int | None = None,
        concurrency: int = 4,
        on_total: Callable[[int], None] | None = None,
        on_progress: Callable[[RescoreOutcome | None], None] | None = None,
    ) -> RescoreSummary:
        """Re-score every stored trajectory of `run` and/or `env` (newest first, at most `limit`).

        Rows are read a page at a time (memory stays bounded however large the run), so a row written
        to the same run meanwhile shifts the pages and may be re-scored twice: a second rescore row
        with the same verdict. `on_total` hears how many rows will be tried; `on_progress` hears each
        outcome (None for a row that was skipped). Rows that cannot be re-scored are skipped and listed
        in the summary, never raised.
        """
        total = await self.store.count(run=run, env=env)
        total = total if limit is None else min(total, limit)
        if on_total is not None:
            on_total(total)
        summary = RescoreSummary()
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(record: TrajectoryRecord) -> None:
            outcome: RescoreOutcome | None = None
            async with gate:
                try:
                    outcome = await self._rescore(record)
                except CannotRescore as exc:
                    summary.skip(record, exc.reason)
                except RolloutNotFound:
                    summary.skip(record, "deleted while re-scoring")
            if outcome is not None:
                summary.add(outcome)
            if on_progress is not None:
                on_progress(outcome)

        order: dict[str, int] = {}
        offset = 0
        while offset < total:
            size = min(PAGE_SIZE, total - offset)
            page = await self.store.list(run=run, env=env, offset=offset, limit=size)
            if not page:
                break
            offset += len(page)
            for record in page:
                order.setdefault(record.id, len(order))
            await asyncio.gather(*(one(record) for record in page))
        summary.outcomes.sort(key=lambda outcome: order[outcome.rollout_id])
        return summary

    @staticmethod
    def _task_of(entry: EnvironmentEntry, record: TrajectoryRecord) -> Task | None:
        """The task the episode was played on (`stored_task`), a refused inline one as `CannotRescore`."""
        try:
            return stored_task(entry, record)
        except GymError as exc:
            raise CannotRescore(
                record.id,
                f"the inline task {record.task_id!r} it was played on is refused by the environment now: "
                f"{exc.detail}",
                env=record.env,
                task_id=record.task_id,
            ) from exc

    async def _rescore(self, record: TrajectoryRecord) -> RescoreOutcome:
        if record.status is TrajectoryStatus.LIVE:
            raise CannotRescore(record.id, "its session is still live; close it first", env=record.env)
        try:
            entry = self.registry.get(record.env)
        except EnvironmentNotFound as exc:
            raise CannotRescore(
                record.id, f"environment {record.env!r} is not installed any more", env=record.env
            ) from exc
        # In a thread: a generated dataset makes the task now (CPU work, first use of a level builds it).
        task = await asyncio.to_thread(self._task_of, entry, record)
        if task is None:
            raise CannotRescore(
                record.id,
                f"task {record.task_id!r} is not in the current dataset of {record.env!r} "
                f"(it was scored on environment version {record.env_version})",
                env=record.env,
                task_id=record.task_id,
            )
        # Deep copies: the engine fills in missing tool-call ids on the messages it is handed.
        turns = [copy.deepcopy(m) for m in record.messages if m.get("role") == "assistant"]
        result = await verify_transcript(entry, task, record.seed, turns, self.limits)
        reward = result.reward if math.isfinite(result.reward) else 0.0
        info = {
            **result.info,
            "rescore": {
                "env_version": entry.version,
                "previous_env_version": record.env_version,
                "previous_reward": record.reward,
                "previous_verifier_version": record.verifier_version,
            },
        }
        # Make sure the row itself is committed (the writer batches) before the rescore references it.
        try:
            async with asyncio.timeout(FLUSH_TIMEOUT_S):
                await self.store.flush()
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"the trajectory store did not commit within {FLUSH_TIMEOUT_S:g} s"
            ) from exc
        stored = await self.store.add_rescore(
            record.id,
            reward=reward,
            components=dict(result.components),
            verifier_version=entry.verifier_version,
            info=info,
            failure=result.failure,
        )
        return RescoreOutcome(
            rollout_id=record.id,
            run=record.run,
            env=record.env,
            task_id=record.task_id,
            previous_reward=stored.previous_reward,
            previous_verifier_version=stored.previous_verifier_version,
            reward=reward,
            components=dict(result.components),
            failure=result.failure,
            verifier_version=entry.verifier_version,
            env_version=entry.version,
            rescored_at=stored.created_at,
            info=info,
        )
