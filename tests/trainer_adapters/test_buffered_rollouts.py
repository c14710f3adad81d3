"""`BufferedRollouts` keeps what the staleness bound allows: a group the gym has marked stale (it finished
too late for any step to take it) is dropped from the producer's memory, and nothing a pull could still
hand out is. The gym here is a stand-in that applies the buffer's rules (admission limit, a group's
oldest call deciding its staleness, oldest ready groups first); the real gym's rules are tested in
tests/api/test_rollout_buffer.py and with GymRolloutFunc in test_trl_async.py."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from gym_trainer.buffered import BufferedRollouts
from gym_trainer.client import GymClient
from gym_trainer.episodes import EpisodeSpec


@dataclass
class Group:
    admitted: int
    oldest_call: int | None = None
    state: str = "open"


@dataclass
class RuleGym:
    """The buffer's rules, in memory: enough of `GymClient` for `BufferedRollouts`."""

    version: int = -1
    first: int = 0
    max_staleness: int = 0
    per_step: int = 1
    groups: dict[str, Group] = field(default_factory=dict)
    handed: list[str] = field(default_factory=list)
    ids: itertools.count[int] = field(default_factory=itertools.count)

    def _mark_stale(self) -> None:
        for group in self.groups.values():
            oldest = group.admitted if group.oldest_call is None else group.oldest_call
            if group.state in ("open", "ready") and oldest < self.version - self.max_staleness:
                group.state = "stale"

    async def announce_version(self, run: str, version: int, **shape: Any) -> dict[str, Any]:
        if self.version < 0:
            self.first = version
            self.max_staleness, self.per_step = shape["max_staleness"], shape["groups_per_step"]
        self.version = version
        self._mark_stale()
        return {}

    async def admit_group(self, run: str, size: int, **where: Any) -> dict[str, Any]:
        self._mark_stale()
        counted = sum(group.state != "stale" for group in self.groups.values())
        limit = (self.version - self.first + self.max_staleness + 1) * self.per_step
        while counted >= limit:  # the real gym holds the admission while the buffer is full
            await asyncio.sleep(0.001)
            counted = sum(group.state != "stale" for group in self.groups.values())
            limit = (self.version - self.first + self.max_staleness + 1) * self.per_step
        group_id = f"g{next(self.ids)}"
        self.groups[group_id] = Group(admitted=self.version)
        return {"group_id": group_id, "version": self.version}

    def finished(self, group_id: str, oldest_call: int) -> None:
        group = self.groups[group_id]
        group.oldest_call = oldest_call
        if group.state == "open":
            group.state = "ready"
        self._mark_stale()

    async def pull_groups(self, run: str, **how: Any) -> dict[str, Any]:
        self._mark_stale()
        ready = [group_id for group_id, group in self.groups.items() if group.state == "ready"]
        if len(ready) < how["min_groups"]:
            await asyncio.sleep(0.001)
            return {"groups": [], "lease_id": None}
        taken = ready[: how["max_groups"]]
        for group_id in taken:
            self.groups[group_id].state = "consumed"
        self.handed += taken
        return {"groups": [{"group_id": group_id} for group_id in taken], "lease_id": "lease"}

    async def acknowledge(self, run: str, lease_id: str) -> dict[str, Any]:
        return {}


async def test_a_group_that_went_stale_is_forgotten_and_nothing_a_step_takes_is() -> None:
    gym = RuleGym()
    sampler_version = 0
    slow = asyncio.Event()
    played: list[str] = []

    async def play(group_id: str, specs: Sequence[EpisodeSpec]) -> list[str]:
        if group_id == "g0":  # the first group outlives its bound: its episode hangs
            version = sampler_version
            await slow.wait()
        else:
            await asyncio.sleep(0.001)
            version = sampler_version
        played.append(group_id)
        gym.finished(group_id, version)
        return [group_id]

    buffered = BufferedRollouts[str](cast(GymClient, gym), "run", max_staleness=1, play=play, concurrency=2)
    spec = [EpisodeSpec("counter", task_id="counter-0000")]
    taken: list[str] = []
    try:
        for step in range(7):
            sampler_version = step  # what GymRolloutFunc does before each step
            taken += await buffered.step(step, spec, [0])
            if step == 2:
                slow.set()  # g0 finishes now: its oldest call was at version 0, stale since version 2
            assert buffered.kept <= 3
    finally:
        await buffered.aclose()
    assert "g0" in played and "g0" not in taken and "g0" not in gym.handed
    assert gym.groups["g0"].state == "stale"
    assert buffered.forgotten == 1 and taken == gym.handed  # every handed group was this producer's
    assert len(taken) == 7
