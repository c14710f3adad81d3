"""Which task a session or a stateless verification plays: named, inline, or drawn from a split by seed.

Pure functions over an environment's registry entry. Dataset access may generate tasks (CPU work for a
generated family), so callers on the event loop run them in a worker thread."""

from __future__ import annotations

import secrets
from typing import Any

from gym_server.sdk.registry import EnvironmentEntry
from gym_server.sdk.tasks import Task

__all__ = ["choose_and_compare", "choose_task"]


def choose_and_compare(
    entry: EnvironmentEntry,
    *,
    task_id: str | None,
    task: Task | dict[str, Any] | None,
    split: str | None,
    seed: int | None,
) -> tuple[Task, int | None, bool]:
    """`choose_task`, and whether the chosen task is inline (not its dataset's task of that id).

    Both may generate tasks (CPU work), so the session manager runs this in a thread.
    """
    chosen, chosen_seed = choose_task(entry, task_id=task_id, task=task, split=split, seed=seed)
    inline = task is not None and entry.dataset.get(chosen.id) != chosen
    return chosen, chosen_seed, inline


def choose_task(
    entry: EnvironmentEntry,
    *,
    task_id: str | None,
    task: Task | dict[str, Any] | None,
    split: str | None,
    seed: int | None,
) -> tuple[Task, int | None]:
    """A session's task and seed: the named task, an inline one (checked by its environment), or, with
    neither, one drawn from `split` by the seed; a draw without a seed gets a random one, which the
    session reports and stores like a given seed, so the episode can be replayed."""
    if isinstance(task, Task):
        return task, seed
    if task is not None:
        return entry.cls.inline_task(task), seed
    if task_id is not None:
        return entry.task(task_id), seed
    if seed is None:
        seed = secrets.randbelow(2**63)
    return entry.draw(split, seed), seed
