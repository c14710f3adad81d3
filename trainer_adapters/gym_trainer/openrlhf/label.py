"""Which gym task an OpenRLHF prompt means: the dataset's label column carries it as JSON.

OpenRLHF hands an agent executor each prompt with its `label` (`--data.label_key`), a string. The gym's
episode opens from the task, not from the prompt text, so the label names the task: `{"env", "task_id"
or "task", "seed"}`. The prompt column is only what OpenRLHF logs; the session's own opening messages
are what the policy sees. `gym_prompt_rows` writes such a dataset from the gym's catalogue.
"""

from __future__ import annotations

import json
from typing import Any

from gym_trainer.client import SyncGymClient
from gym_trainer.episodes import EpisodeSpec

__all__ = ["gym_label", "gym_prompt_rows", "parse_label"]


def gym_label(
    env: str, *, task_id: str | None = None, task: dict[str, Any] | None = None, seed: int | None = None
) -> str:
    """The label of a prompt row: JSON naming a dataset task (`task_id`) or an inline `task`."""
    if (task_id is None) == (task is None):
        raise ValueError("name exactly one of task_id and task")
    fields = {"env": env, "task_id": task_id, "task": task, "seed": seed}
    return json.dumps({key: value for key, value in fields.items() if value is not None}, sort_keys=True)


def parse_label(label: Any) -> EpisodeSpec:
    """The episode a label names (a JSON string, or the dict OpenRLHF may already have parsed).

    Raises:
        ValueError: the label is not a gym label; the message says what one looks like.
    """
    data = label
    if isinstance(label, str):
        try:
            data = json.loads(label)
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict) or not isinstance(data.get("env"), str):
        raise ValueError(
            f"not a gym label: {str(label)[:200]!r}; each row's label must be JSON such as "
            '{"env": "counter", "task_id": "counter-0000", "seed": 0} (see gym_label)'
        )
    task = data.get("task")
    if (data.get("task_id") is None) == (task is None):
        raise ValueError(f"a gym label names exactly one of task_id and task: {data!r}")
    if task is not None and not isinstance(task, dict):
        raise ValueError(f"a gym label's task must be an object: {data!r}")
    seed = data.get("seed")
    return EpisodeSpec(
        env=data["env"], task_id=data.get("task_id"), task=task, seed=None if seed is None else int(seed)
    )


def gym_prompt_rows(
    gym: SyncGymClient, env: str, *, split: str | None = "train", limit: int | None = None, seed: int = 0
) -> list[dict[str, str]]:
    """`{"prompt", "label"}` rows for OpenRLHF's prompt dataset (`--data.input_key prompt
    --data.label_key label`), one per task of `env`'s split, every task at gym seed `seed`."""
    rows = []
    tasks = gym.all_tasks(env, split=split)
    for task in tasks if limit is None else tasks[:limit]:
        text = str(task.get("prompt") or task["id"])
        rows.append({"prompt": text, "label": gym_label(env, task_id=task["id"], seed=seed)})
    return rows
