"""A curriculum from the store: which tasks a policy should play next, weighted by its pass rates.

A task a policy always solves, or never does, gives GRPO's group advantage nothing to learn from (DAPO's
dynamic sampling drops such groups after generating them). Choosing tasks by the policy's recorded pass
rate avoids generating them in the first place. The pass rates come from the store's running totals
(`trajectory_totals`): per task, the episodes with a reward (`scored`) and those with full marks and no
failure class (`successes`); pass rate = successes / scored. They cover the policy model's whole history on
the environment, or one run's (`run`: the recent history of one training run), of the caller's tenant.

Rules (the full statement with examples is `docs/curriculum.md`):
- `uniform`: every task of the split, weight 1.
- `frontier`: the tasks whose pass rate lies in [min_pass, max_pass], weight 1, plus the unseen ones
  (fewer than `min_episodes` scored episodes: their rate is unknown, they may be on the frontier).
- `difficulty`: every task, weight max(1 - pass rate, floor); an unseen task weighs 1.
A policy with no scored episode on any task of the split, or a frontier that holds no task, falls back to
`uniform`, and the answer says so in `fallback`. A draw is a function of env, split, seed and the weights.

Everything here reads the store or a dataset, so callers on the event loop run it in a worker thread.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy.orm import Session

from gym_server.sdk.registry import EnvironmentEntry
from gym_server.store.inspector import TaskPasses, task_passes
from gym_server.store.records import NAME_MAX_CHARS, NAME_PATTERN
from gym_server.store.repository import TrajectoryFilter

__all__ = [
    "Curriculum",
    "CurriculumDraw",
    "Rule",
    "TaskChoice",
    "WeightedTask",
    "choose_by_pass_rate",
    "curriculum_for",
    "draw_task",
    "weigh_tasks",
]

Rule = Literal["uniform", "frontier", "difficulty"]


class TaskChoice(BaseModel):
    """How to choose a task by the policy's pass rates (session create's `task_choice`, the curriculum
    route's query)."""

    model_config = ConfigDict(extra="forbid")

    rule: Rule = Field("frontier", description="uniform, frontier (a pass-rate band) or difficulty (weights)")
    policy: str | None = Field(
        None,
        min_length=1,
        max_length=NAME_MAX_CHARS,
        pattern=NAME_PATTERN,
        description="the policy model whose history counts (session create: default `policy.model`)",
    )
    run: str | None = Field(
        None, max_length=NAME_MAX_CHARS, pattern=NAME_PATTERN, description="count only this run's episodes"
    )
    min_pass: float = Field(0.1, ge=0.0, le=1.0, description="frontier: the lowest pass rate kept")
    max_pass: float = Field(0.9, ge=0.0, le=1.0, description="frontier: the highest pass rate kept")
    min_episodes: int = Field(1, ge=1, le=1_000_000, description="scored episodes before a rate counts")
    floor: float = Field(0.05, gt=0.0, le=1.0, description="difficulty: the smallest weight of a task")

    @model_validator(mode="after")
    def _band(self) -> TaskChoice:
        if self.min_pass > self.max_pass:
            raise ValueError(f"min_pass {self.min_pass:g} is above max_pass {self.max_pass:g}")
        return self


class WeightedTask(BaseModel):
    task_id: str
    weight: float
    scored: int = Field(description="episodes with a reward in the history read")
    pass_rate: float | None = Field(description="successes / scored; None while unseen")


class Curriculum(BaseModel):
    """The tasks of a split a rule keeps, with their weights (GET /v1/environments/{env}/curriculum)."""

    env: str
    split: str
    requested: Rule = Field(description="the rule asked for")
    rule: Rule = Field(description="the rule applied: `uniform` after a fallback")
    policy: str | None
    run: str | None
    fallback: str | None = Field(None, description="why the requested rule was not applied")
    tasks: list[WeightedTask] = Field(description="tasks with a weight above 0, in split order")


class CurriculumDraw(BaseModel):
    """What a session created by `task_choice` reports of its choice (its `task_choice` field)."""

    task_id: str
    requested: Rule
    rule: Rule
    policy: str | None
    run: str | None
    fallback: str | None
    pass_rate: float | None
    scored: int
    candidates: int = Field(description="tasks the rule kept")


def weigh_tasks(
    env: str,
    split: str,
    task_ids: Sequence[str],
    passes: Mapping[str, TaskPasses],
    choice: TaskChoice,
    policy: str | None,
) -> Curriculum:
    """The weights `choice` gives the split's tasks, from the policy's `passes` (pure: no I/O)."""
    seen = {task_id: passes[task_id] for task_id in task_ids if task_id in passes}
    rates = {
        task_id: count.successes / count.scored
        for task_id, count in seen.items()
        if count.scored >= choice.min_episodes
    }
    fallback = None
    weights: dict[str, float] = {}
    if choice.rule != "uniform" and not seen:
        fallback = f"policy {policy!r} has no scored episode on a task of {env}/{split}: uniform sampling"
    elif choice.rule == "frontier":
        weights = {
            task_id: 1.0
            for task_id in task_ids
            if task_id not in rates or choice.min_pass <= rates[task_id] <= choice.max_pass
        }
        if not weights:
            fallback = (
                f"no task of {env}/{split} has a pass rate in [{choice.min_pass:g}, {choice.max_pass:g}] "
                f"for policy {policy!r}: uniform sampling"
            )
    elif choice.rule == "difficulty":
        weights = {task_id: max(1.0 - rates.get(task_id, 0.0), choice.floor) for task_id in task_ids}
    rule: Rule = "uniform" if fallback is not None or choice.rule == "uniform" else choice.rule
    if rule == "uniform":
        weights = dict.fromkeys(task_ids, 1.0)
    tasks = [
        WeightedTask(
            task_id=task_id,
            weight=weights[task_id],
            scored=seen[task_id].scored if task_id in seen else 0,
            pass_rate=rates.get(task_id),
        )
        for task_id in task_ids
        if weights.get(task_id, 0.0) > 0.0
    ]
    return Curriculum(
        env=env,
        split=split,
        requested=choice.rule,
        rule=rule,
        policy=policy,
        run=choice.run,
        fallback=fallback,
        tasks=tasks,
    )


def draw_task(curriculum: Curriculum, seed: int) -> WeightedTask:
    """One task drawn by weight; the same curriculum and seed draw the same task in every process."""
    rng = random.Random(f"{curriculum.env}\x00{curriculum.split}\x00{seed}")
    return rng.choices(curriculum.tasks, weights=[task.weight for task in curriculum.tasks])[0]


def curriculum_for(
    session: Session,
    entry: EnvironmentEntry,
    split: str | None,
    choice: TaskChoice,
    policy: str | None,
    tenant: str | None,
) -> Curriculum:
    """The curriculum of `entry`'s split (default `train`, else the first) for `policy`, from the store.

    Raises:
        SplitNotFound: no such split, or it holds no tasks.
    """
    name = entry.split_name(split)
    task_ids = [task.id for task in entry.dataset.task_range(name, 0, entry.dataset.split_sizes()[name])]
    passes: Mapping[str, TaskPasses] = {}
    if choice.rule != "uniform" and policy is not None:
        where = TrajectoryFilter(env=entry.name, policy=policy, run=choice.run, tenant=tenant)
        passes = task_passes(session, where)
    return weigh_tasks(entry.name, name, task_ids, passes, choice, policy)


def choose_by_pass_rate(curriculum: Curriculum, seed: int) -> CurriculumDraw:
    """One task drawn from `curriculum` by `seed`, and how it was chosen (a session's task at create)."""
    chosen = draw_task(curriculum, seed)
    return CurriculumDraw(
        task_id=chosen.task_id,
        requested=curriculum.requested,
        rule=curriculum.rule,
        policy=curriculum.policy,
        run=curriculum.run,
        fallback=curriculum.fallback,
        pass_rate=chosen.pass_rate,
        scored=chosen.scored,
        candidates=len(curriculum.tasks),
    )
