"""Groups sampled as trees: one prefix, continuations forked from chosen turns (docs/fork.md).

A flat GRPO group plays n whole episodes of one task. A tree group plays one episode (the root), then
forks it at chosen turns (`POST /v1/sessions/{id}/fork`) and continues each fork with the policy: the
siblings of a branch point share every token before it, so the prefix is generated once, not n times,
and a reward difference between siblings is their continuations' doing (turn-level advantages).

Each sample's training columns are exact: a branch's `prompt_ids`, `completion_ids`, `logprobs` and
`env_mask` are the root's up to the branch point (verbatim: the same ids the policy sampled and the
same environment tokens) followed by its own, exactly as if that whole episode had been sampled in one
go. What it shares is said on the sample: `parent_session_id`, `branch_turn` and `branch_token` (where
its own tokens begin in `completion_ids`), so a trainer can compute advantages among siblings, or mask
the shared prefix out of all but one sample. The root is played, scored and closed first; the forks are
made from its stored trajectory, so the gym rebuilds its state on the server (a replay per fork, or one
replay copied, per the environment's `fork_mode`): no token is generated for the prefix again.

A fork the gym refuses (a non-deterministic environment's 409, capacity) leaves its samples failed with
`gym_error` (no signal), so a group always has its n samples.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gym_trainer.client import ForkInfo, GymClientError
from gym_trainer.driver import GymBackend, RolloutDriver
from gym_trainer.episodes import EpisodeSpec, Rollout

__all__ = ["ForkingBackend", "TreeShape", "run_tree", "tree_costs"]


class ForkingBackend(GymBackend, Protocol):
    """A `GymBackend` that can also fork an episode (`GymClient`)."""

    async def fork(
        self,
        session_id: str,
        turn: int,
        n: int = 1,
        *,
        ttl_s: float | None = None,
        run: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ForkInfo: ...


@dataclass(frozen=True, slots=True)
class TreeShape:
    """Where a tree group's forks branch off its root.

    Args:
        turns: the root's turns to fork at, used in turn for the n-1 forks (a turn the root did not
            reach becomes its last forkable one); None: each fork's turn is drawn uniformly from the
            root's turns 1..K (K: the last turn after which it went on), seeded by `seed`.
        seed: the draw's seed (with the group's gym seed), so a run is reproducible.
    """

    turns: tuple[int, ...] | None = None
    seed: int = 0


async def run_tree(
    driver: RolloutDriver, gym: ForkingBackend, spec: EpisodeSpec, n: int, shape: TreeShape
) -> list[Rollout]:
    """n samples of one task as a tree: the root first, then the forks ordered by branch turn."""
    root = await driver.run_episode(_with_sample_seed(spec, driver, 0))
    if n <= 1:
        return [root]
    if root.session_id is None:  # the root never opened: nothing to fork, no signal for the group
        refused = GymClientError("the group's root episode did not open")
        return [root, *(_failed_branch(root, 0, refused) for _ in range(n - 1))]
    turns = _branch_turns(root, n - 1, shape, spec)
    counts: dict[int, int] = {}
    for turn in turns:
        counts[turn] = counts.get(turn, 0) + 1
    samples: list[Rollout] = []
    index = 1
    branches = []
    for turn, count in sorted(counts.items()):
        branches.append((turn, count, index))
        index += count
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_branch(driver, gym, spec, root, t, c, i)) for t, c, i in branches]
    for task in tasks:
        samples.extend(task.result())
    return [root, *samples]


def _branch_turns(root: Rollout, count: int, shape: TreeShape, spec: EpisodeSpec) -> list[int]:
    """The turns the `count` forks branch at: each one the root went on after (it has a start)."""
    last = len(root.turn_starts) - 1  # turn_starts[k] exists: the root sampled a turn after turn k
    if last < 0:
        return [0] * count
    if shape.turns is not None:
        return [min(max(0, shape.turns[i % len(shape.turns)]), last) for i in range(count)]
    rng = random.Random(f"{shape.seed}:{spec.seed}:{spec.task_id}")
    low = 1 if last >= 1 else 0
    return sorted(rng.randint(low, last) for _ in range(count))


async def _branch(
    driver: RolloutDriver,
    gym: ForkingBackend,
    spec: EpisodeSpec,
    root: Rollout,
    turn: int,
    count: int,
    first_index: int,
) -> list[Rollout]:
    """`count` forks of the root at `turn`, each continued by the policy to its end."""
    specs = [_with_sample_seed(spec, driver, first_index + i) for i in range(count)]
    assert root.session_id is not None
    try:
        forked = await gym.fork(
            root.session_id, turn, count, ttl_s=driver.config.ttl_s, metadata=driver.config.metadata or None
        )
    except GymClientError as exc:
        return [_failed_branch(root, turn, exc) for _ in range(count)]
    cut = root.turn_starts[turn]
    continued = []
    for index, (info, branch_spec) in enumerate(zip(forked.forks, specs, strict=True)):
        rollout = Rollout(env=root.env, task_id=root.task_id, seed=root.seed, session_id=info.session_id)
        rollout.prompt_ids = list(root.prompt_ids)
        rollout.completion_ids = root.completion_ids[:cut]
        rollout.logprobs = root.logprobs[:cut]
        rollout.env_mask = root.env_mask[:cut]
        rollout.turn_starts = root.turn_starts[:turn]
        rollout.turn_texts = root.turn_texts[:turn]
        rollout.num_turns = turn
        rollout.transcript, rollout.tools = list(info.messages), list(info.tools)
        rollout.parent_session_id, rollout.branch_turn, rollout.branch_token = root.session_id, turn, cut
        rollout.fork_mode = forked.fork_mode
        # The root is stored, so the gym replays `turn` steps: for each fork, or once and copies it.
        rollout.replayed_steps = turn if forked.fork_mode == "replay" or index == 0 else 0
        continued.append(driver.continue_episode(info, rollout, branch_spec))
    return list(await asyncio.gather(*continued))


def _failed_branch(root: Rollout, turn: int, exc: GymClientError) -> Rollout:
    rollout = Rollout(env=root.env, task_id=root.task_id, seed=root.seed, prompt_ids=list(root.prompt_ids))
    rollout.parent_session_id, rollout.branch_turn = root.session_id, turn
    rollout.failure = rollout.stop_reason = "gym_error"
    rollout.error = f"the fork was refused: {type(exc).__name__}: {exc}"[:500]
    rollout.reward = None
    return rollout


def _with_sample_seed(spec: EpisodeSpec, driver: RolloutDriver, index: int) -> EpisodeSpec:
    base = driver.config.sampling.seed if spec.sample_seed is None else spec.sample_seed
    seed = None if base is None else base + index
    return EpisodeSpec(spec.env, spec.task_id, spec.task, spec.seed, seed)


def tree_costs(samples: Sequence[Rollout]) -> dict[str, int]:
    """What a group cost: tokens generated and environment steps (the driver's, and the steps the gym
    replayed on the server to rebuild forks), for the benchmark's per-sample figures."""
    return {
        "samples": len(samples),
        "generated_tokens": sum(sample.generated_tokens for sample in samples),
        "env_steps": sum(sample.env_steps for sample in samples),
        "replayed_steps": sum(sample.replayed_steps for sample in samples),
    }
