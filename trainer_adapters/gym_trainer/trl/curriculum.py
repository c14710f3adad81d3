"""A TRL training dataset drawn by the gym's curriculum: tasks weighted by the policy's pass rates, mixed
across environments.

`load_curriculum_dataset` asks the gym for each environment's curriculum (GET
/v1/environments/{env}/curriculum: the tasks a rule keeps and their weights, see docs/curriculum.md), then
draws `size` rows: an environment by the mixture's weights, a task by the curriculum's. The rows are
`gym_prompt` prompts, so `GymRolloutFunc` plays them. A curriculum read once is a snapshot: rebuild the
dataset (every few hundred steps, say) as the pass rates move. When the gym falls back to uniform sampling
(a policy without history), the reason is logged and kept in the `curriculum_rule` column.
"""

from __future__ import annotations

import importlib
import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

from gym_trainer.client import SyncGymClient
from gym_trainer.trl.rollout import gym_prompt, prompt_text

__all__ = ["load_curriculum_dataset"]

log = logging.getLogger(__name__)


def load_curriculum_dataset(
    gym_url: str,
    envs: Mapping[str, float] | Sequence[str],
    size: int,
    *,
    task_choice: Mapping[str, Any] | None = None,
    split: str | None = "train",
    seed: int = 0,
    api_key: str | None = None,
) -> Any:
    """A Hugging Face `Dataset` of `size` rows drawn by the gym's curriculum.

    Args:
        gym_url: the gym's base URL.
        envs: environment names (equal shares), or names with mixture weights.
        size: how many rows to draw (tasks repeat by weight).
        task_choice: the rule and its parameters, e.g. `{"rule": "frontier", "policy": "my-model",
            "min_pass": 0.1, "max_pass": 0.9}`; None draws uniformly.
        split: the split each environment's tasks come from.
        seed: the draw's seed: the same curricula and seed give the same rows.
        api_key: the gym's key (default `$GYM_API_KEY`).

    Returns:
        A `Dataset` with columns `prompt`, `env`, `task_id`, `pass_rate` (None while unseen) and
        `curriculum_rule` (the rule applied: `uniform` after a fallback). Needs `datasets` (the `[trl]`
        extra).
    """
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    mixture = dict(envs) if isinstance(envs, Mapping) else dict.fromkeys(envs, 1.0)
    if not mixture or any(weight <= 0 for weight in mixture.values()):
        raise ValueError(f"envs needs at least one environment, each with a weight above 0: {mixture}")
    hf_datasets = importlib.import_module("datasets")
    choice = dict(task_choice or {"rule": "uniform"})
    curricula: dict[str, dict[str, Any]] = {}
    texts: dict[str, dict[str, str]] = {}
    with SyncGymClient(gym_url, api_key=api_key) as gym:
        for env in mixture:
            curricula[env] = gym.curriculum(env, split=split, **choice)
            if curricula[env]["fallback"]:
                log.warning("curriculum of %s: %s", env, curricula[env]["fallback"])
            texts[env] = {task["id"]: prompt_text(task["prompt"]) for task in gym.all_tasks(env, split=split)}
    rng = random.Random(seed)
    names = list(mixture)
    rows = []
    for _ in range(size):
        env = rng.choices(names, weights=[mixture[name] for name in names])[0]
        tasks = curricula[env]["tasks"]
        task = rng.choices(tasks, weights=[entry["weight"] for entry in tasks])[0]
        rows.append(
            {
                "prompt": gym_prompt(env, texts[env][task["task_id"]], task_id=task["task_id"]),
                "env": env,
                "task_id": task["task_id"],
                "pass_rate": task["pass_rate"],
                "curriculum_rule": curricula[env]["rule"],
            }
        )
    return hf_datasets.Dataset.from_list(rows)
