"""`BufferedRollouts`: asynchronous rollouts for any trainer, through the gym's rollout buffer.

A trainer step calls `step(version, specs, groups)`: it announces the policy version it trains from,
hands the producer the step's groups (the specs of each group index: one task each), and gets back as
many complete groups (their results flattened, group after group) as the step has, handed out by the
gym within the staleness bound; the first step's number of groups is the run's `groups_per_step`.
Meanwhile a producer task plays groups without pause, each admitted by the gym first, so it is at most
`max_staleness` steps ahead (docs/rollout-buffer.md: the admission rule). Generation of step s+1 thus
runs while step s trains.

What a producer plays: the groups of each step in order; when it has played them all and the gym still
admits more (it is ahead of the trainer), the latest step's groups again, with new sampling seeds, so
the policy server never idles. A group is handed back to the step that pulled it, whichever step's
prompts it was made of: the trainer learns from the prompts one step later than it saw them.

One producer per policy run, in this process: the results of the groups it played are kept here by
group id until a step takes them or the gym has surely marked them stale (`forgotten`), and a pull that
hands out a group this process did not play is an error. Trainer-agnostic:
`play(group_id, specs)` is whatever plays a group (the driver, an agent through the gateway) and
returns its results, with the group id in each session's metadata.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

from gym_trainer.client import GymClient, GymUnavailable
from gym_trainer.episodes import EpisodeSpec

__all__ = ["BUFFER_GROUP_KEY", "BufferedRollouts"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# The session metadata key that files an episode under its group (the server's `records.BUFFER_GROUP_KEY`).
BUFFER_GROUP_KEY = "buffer_group"
# How long the gym holds an admission while the buffer is full (it admits the moment a step makes room).
_ADMIT_WAIT_S = 20.0
# Added to a replayed group's sampling seeds per replay, so a replay samples anew.
_REPLAY_SEED_STRIDE = 1_000_003


class BufferedRollouts(Generic[T]):
    """The producer and the puller of one policy run's groups.

    Args:
        gym: the gym's client (its event loop runs the producer).
        run: the policy run (the trajectories' `run`).
        max_staleness: k >= 1; no group more than k versions behind the trainer is handed out.
        play: plays one admitted group; called with its id and specs, returns one result per spec.
        concurrency: episodes played at once (whole groups: at least one group).
        policy: the policy's model name, announced with the run.
        poll_s: how long the producer waits before asking again when the gym stayed full.
    """

    def __init__(
        self,
        gym: GymClient,
        run: str,
        *,
        max_staleness: int,
        play: Callable[[str, Sequence[EpisodeSpec]], Awaitable[list[T]]],
        concurrency: int = 1,
        policy: str | None = None,
        poll_s: float = 0.25,
    ) -> None:
        if max_staleness < 1:
            raise ValueError(
                f"max_staleness is at least 1 here (0 is the synchronous loop); got {max_staleness}"
            )
        self.gym, self.run, self.play = gym, run, play
        self.max_staleness, self.concurrency = max_staleness, concurrency
        self.groups_per_step = self.groups_at_once = 0  # set by the first step
        self.policy, self.poll_s = policy, poll_s
        self._queue: collections.deque[Sequence[EpisodeSpec]] = collections.deque()
        self._latest: list[Sequence[EpisodeSpec]] = []
        self._replays = 0
        self._results: dict[str, asyncio.Future[list[T]]] = {}
        # finished groups: a version none of their calls was sampled above (see `_forget_stale`)
        self._bounds: dict[str, int] = {}
        self._playing: set[asyncio.Task[None]] = set()
        self._producer: asyncio.Task[None] | None = None
        self.replayed = 0  # groups played again because the producer ran ahead of the steps' prompts
        self.forgotten = 0  # finished groups dropped here because the gym never hands them out (stale)

    def __repr__(self) -> str:
        return (
            f"BufferedRollouts(run={self.run!r}, max_staleness={self.max_staleness}, "
            f"groups_per_step={self.groups_per_step}, kept={self.kept}, forgotten={self.forgotten})"
        )

    @property
    def kept(self) -> int:
        """Groups admitted and not yet taken by a step nor forgotten (playing, or played and waiting)."""
        return len(self._results)

    async def step(self, version: int, specs: Sequence[EpisodeSpec], groups: Sequence[int]) -> list[T]:
        """Announce `version`, queue the step's groups (`groups[i]`: the group index of `specs[i]`) for
        the producer, and return as many groups' results (waiting for them), acknowledged to the gym."""
        grouped: list[list[EpisodeSpec]] = [[] for _ in range(max(groups) + 1)]
        for spec, group in zip(specs, groups, strict=True):
            grouped[group].append(spec)
        return [result for group in await self._step(version, grouped) for result in group]

    async def _step(self, version: int, groups: list[list[EpisodeSpec]]) -> list[list[T]]:
        for group_id, played in self._results.items():
            if played.done():  # every call it made was sampled at `version` or before
                self._bounds.setdefault(group_id, version)
        shape = {}
        if self._producer is None:
            self.groups_per_step = len(groups)
            self.groups_at_once = max(1, self.concurrency // max(len(group) for group in groups))
            shape = {"max_staleness": self.max_staleness, "groups_per_step": self.groups_per_step}
        await self.gym.announce_version(self.run, version, policy=self.policy, **shape)
        self._latest = list(groups)
        self._queue.extend(groups)
        if self._producer is None:
            self._producer = asyncio.create_task(self._produce(), name=f"produce-{self.run}")
        while True:
            if self._producer.done():
                self._producer.result()  # the producer's error, raised here
            handout = await self.gym.pull_groups(
                self.run, max_groups=self.groups_per_step, min_groups=self.groups_per_step, wait_s=5.0
            )
            if handout["groups"]:
                break
        results = []
        for group in handout["groups"]:
            self._bounds.pop(group["group_id"], None)
            future = self._results.pop(group["group_id"], None)
            if future is None:
                raise RuntimeError(
                    f"policy run {self.run!r} handed out group {group['group_id']} that this process did not "
                    "play: run one producer per policy run"
                )
            results.append(await future)
        await self.gym.acknowledge(self.run, handout["lease_id"])
        self._forget_stale(version)
        return results

    def _forget_stale(self, version: int) -> None:
        """Drop the results of finished groups that the gym has marked stale, so that a producer running
        ahead of a long run (its replays) keeps what the bound allows, not every group it ever played.

        A group is stale at the gym when its oldest call (or, without one, its admission) is more than
        `max_staleness` versions behind the announced version. A finished group's bound, the version of
        the first step that saw it finished, is at least its oldest call's version: the caller sets the
        sampler's version before the step announces it, so no call of a group done by then was sampled
        above it, and its admission came before. Bound below `version - max_staleness`, then, means stale
        at the gym, which never hands the group out: nothing is dropped that a pull could still want."""
        oldest_allowed = version - self.max_staleness
        for group_id in [group for group, bound in self._bounds.items() if bound < oldest_allowed]:
            del self._bounds[group_id]
            future = self._results.pop(group_id)
            if not future.cancelled():
                future.exception()  # a stale group's failure reaches no step (it was logged)
            self.forgotten += 1

    async def aclose(self) -> None:
        """Stop producing; groups in play are cancelled (their sessions close as the driver leaves them)."""
        tasks = [task for task in (self._producer, *self._playing) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._producer = None

    async def _produce(self) -> None:
        slots = asyncio.Semaphore(self.groups_at_once)
        while True:
            await slots.acquire()
            specs = self._next()
            try:
                admitted = await self._admit(specs)
            except BaseException:
                slots.release()
                raise
            group_id = str(admitted["group_id"])
            result: asyncio.Future[list[T]] = asyncio.get_running_loop().create_future()
            self._results[group_id] = result
            task = asyncio.create_task(self._play_one(group_id, specs, result, slots))
            self._playing.add(task)
            task.add_done_callback(self._playing.discard)

    async def _play_one(
        self,
        group_id: str,
        specs: Sequence[EpisodeSpec],
        result: asyncio.Future[list[T]],
        slots: asyncio.Semaphore,
    ) -> None:
        try:
            result.set_result(await self.play(group_id, specs))
        except asyncio.CancelledError:
            result.cancel()
            raise
        except Exception as exc:  # the step that pulls this group raises it
            log.warning("group %s of %r failed: %r", group_id, self.run, exc)
            result.set_exception(exc)
        finally:
            slots.release()

    async def _admit(self, specs: Sequence[EpisodeSpec]) -> dict[str, object]:
        while True:
            try:
                return await self.gym.admit_group(
                    self.run, len(specs), env=specs[0].env, task_id=specs[0].task_id, wait_s=_ADMIT_WAIT_S
                )
            except GymUnavailable:  # 429: the buffer is as far ahead as the bound allows
                await asyncio.sleep(self.poll_s)

    def _next(self) -> Sequence[EpisodeSpec]:
        """The next group to play: the steps' groups in order, then the latest step's again."""
        if self._queue:
            return self._queue.popleft()
        group = self._latest[self._replays % len(self._latest)]
        self._replays += 1
        self.replayed += 1
        shift = _REPLAY_SEED_STRIDE * (self._replays // len(self._latest) + 1)
        return [
            spec if spec.sample_seed is None else replace(spec, sample_seed=spec.sample_seed + shift)
            for spec in group
        ]
