"""verl reward functions for single-turn tasks: the gym's verifiers, over `/v1/verify`.

verl loads a custom reward function by `reward.custom_reward_function.path` and `.name`, and passes
`reward_kwargs` as keyword arguments (here `gym_url`, `env`, `api_key`):

- `compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)`: one sample; async, so
  verl's reward loop (its default `naive` reward manager) awaits it without a thread.
- `compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs)`: verl's
  `batch` reward manager; the whole batch is one `POST /v1/verify/batch`.

Which task: the row's `extra_info` (`gym_env`, `gym_task_id` or `gym_task`, `gym_seed`), else `env`
from the kwargs (default: verl's `data_source`) with `ground_truth` as the task id. Samples the agent
loop already scored never reach these (verl skips the reward function when `reward_score` is set).

No signal (the gym cannot score a sample: its verifier failed, or the item was refused): never 0.
verl has no per-sample exclusion flag, and a NaN would spread through the group's baseline, so:
`compute_score_batch` gives such a sample the mean score of the scored samples of the same task in the
batch (its GRPO group), which makes its group-relative advantage 0, and marks it `gym_no_signal`;
with no scored sibling, or in the one-sample `compute_score`, it raises `NoSignal` (the step stops with
the failure class, rather than training on a made-up reward).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from gym_trainer.client import GymClient, SyncGymClient, VerifyResult

__all__ = ["NoSignal", "compute_score", "compute_score_batch", "verify_request"]


class NoSignal(RuntimeError):
    """The gym could not score a sample and no neutral score exists for it (see the module doc)."""


def verify_request(
    solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None, env: str | None
) -> dict[str, Any]:
    """The `/v1/verify` body for one sample."""
    info = dict(extra_info or {})
    name = info.get("gym_env") or env
    if not name:
        raise ValueError("the row's extra_info has no gym_env and the reward kwargs no env")
    body: dict[str, Any] = {"env": str(name), "completion": solution_str}
    task = info.get("gym_task")
    if task is not None:
        body["task"] = json.loads(task) if isinstance(task, str) else task
    else:
        task_id = info.get("gym_task_id") or ground_truth
        if not task_id:
            raise ValueError("the row names no gym task (extra_info gym_task_id/gym_task, or ground_truth)")
        body["task_id"] = str(task_id)
    if info.get("gym_seed") is not None:
        body["seed"] = int(info["gym_seed"])
    return body


def _failure(result: VerifyResult | dict[str, Any]) -> str | None:
    """The failure class of one verify answer, None when it scored."""
    if isinstance(result, VerifyResult):
        return result.failure
    return str(result.get("type") or result.get("title") or "error")


def _scored(result: VerifyResult) -> dict[str, Any]:
    return {"score": float(result.reward), "gym_no_signal": False, "gym_failure": None}


def _gym_url(gym_url: str | None) -> str:
    return gym_url or os.environ.get("GYM_URL", "http://127.0.0.1:8000")


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    *,
    gym_url: str | None = None,
    env: str | None = None,
    api_key: str | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Score one completion with the gym's verifier (`env` defaults to verl's `data_source`)."""
    body = verify_request(solution_str, ground_truth, extra_info, env or data_source)
    async with GymClient(_gym_url(gym_url), api_key=api_key) as gym:  # None: $GYM_API_KEY
        result = (await gym.verify_batch([body]))[0]
    failure = _failure(result)
    if failure is not None or not isinstance(result, VerifyResult):
        raise NoSignal(f"the gym could not score the sample ({failure}): {body}")
    return _scored(result)


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict[str, Any] | None],
    *,
    gym_url: str | None = None,
    env: str | None = None,
    api_key: str | None = None,
    **_: Any,
) -> list[dict[str, Any]]:
    """Score a batch in one `POST /v1/verify/batch`; one dict per sample, in order."""
    bodies = [
        verify_request(solution, truth, info, env or source)
        for source, solution, truth, info in zip(
            data_sources, solution_strs, ground_truths, extra_infos, strict=True
        )
    ]
    with SyncGymClient(_gym_url(gym_url), api_key=api_key) as gym:  # None: $GYM_API_KEY
        results = gym.verify_batch(bodies)
    groups: dict[str, list[float]] = {}
    for body, result in zip(bodies, results, strict=True):
        if isinstance(result, VerifyResult) and result.failure is None:
            groups.setdefault(_group(body), []).append(float(result.reward))
    scores: list[dict[str, Any]] = []
    for body, result in zip(bodies, results, strict=True):
        failure = _failure(result)
        if failure is None and isinstance(result, VerifyResult):
            scores.append(_scored(result))
            continue
        siblings = groups.get(_group(body))
        if not siblings:
            raise NoSignal(f"the gym could not score a sample ({failure}) and no sample of its task scored")
        scores.append({"score": sum(siblings) / len(siblings), "gym_no_signal": True, "gym_failure": failure})
    return scores


def _group(body: dict[str, Any]) -> str:
    """A sample's group: the same task and seed (what GRPO's `uid` groups, as the rows carry it)."""
    return json.dumps({key: body.get(key) for key in ("env", "task_id", "task", "seed")}, sort_keys=True)
