"""The per-step metrics every training entry point logs, computed from finished rollouts.

One function so that the TRL adapter, `gym-server demo` and the other trainers' examples log the same
names with the same meaning (a dashboard built for one trainer reads the others):

| name                           | meaning                                                               |
|--------------------------------|-----------------------------------------------------------------------|
| `gym/episodes`                 | episodes played this step                                             |
| `gym/reward_mean`, `_std`      | over scored episodes (a failure is "no signal", not 0)                 |
| `gym/success_rate`             | scored episodes with reward >= 1                                      |
| `gym/invalid_tool_call_rate`   | assistant turns whose tool call could not be parsed, per turn         |
| `gym/no_signal_rate`           | episodes that ended with a failure class                              |
| `gym/failures/<class>`         | episodes per failure class (`gym_error`, `policy_timeout`, ...)       |
| `gym/episode_turns_mean`       | assistant turns per episode                                           |
| `gym/episode_tokens_mean`      | completion tokens per episode (model and environment tokens)          |
| `gym/model_tokens_mean`        | model-written tokens per episode                                      |
| `gym/env_latency_ms_per_step`  | time spent in the gym (steps, truncated-turn records) per turn        |
| `gym/sample_ms_per_turn`       | time spent sampling per turn (the policy's share, for comparison)     |

Failure classes appear only in the steps where they occur; a backend shows them as sparse series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gym_trainer.episodes import Rollout

__all__ = ["PREFIX", "rollout_metrics"]

PREFIX = "gym/"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def rollout_metrics(rollouts: Sequence[Rollout], prefix: str = PREFIX) -> dict[str, float]:
    """The metrics of one training step's (or one evaluation's) episodes; a metric with no value
    (a reward mean with no scored episode) is left out rather than logged as NaN."""
    scored = [r.reward for r in rollouts if r.reward is not None]
    mean = _mean(scored)
    std = math.sqrt(_mean([(r - mean) ** 2 for r in scored])) if scored else math.nan
    turns = sum(r.num_turns for r in rollouts)
    failures: dict[str, int] = {}
    for rollout in rollouts:
        if rollout.failure:
            failures[rollout.failure] = failures.get(rollout.failure, 0) + 1
    metrics = {
        "episodes": float(len(rollouts)),
        "reward_mean": mean,
        "reward_std": std,
        "success_rate": _mean([1.0 if r >= 1.0 else 0.0 for r in scored]),
        "invalid_tool_call_rate": sum(r.parse_errors for r in rollouts) / turns if turns else math.nan,
        "no_signal_rate": _mean([1.0 if r.failure else 0.0 for r in rollouts]),
        "episode_turns_mean": _mean([float(r.num_turns) for r in rollouts]),
        "episode_tokens_mean": _mean([float(len(r.completion_ids)) for r in rollouts]),
        "model_tokens_mean": _mean([float(r.model_tokens) for r in rollouts]),
        "env_latency_ms_per_step": sum(r.timings.get("env_ms", 0.0) for r in rollouts) / turns
        if turns
        else math.nan,
        "sample_ms_per_turn": sum(r.timings.get("sample_ms", 0.0) for r in rollouts) / turns
        if turns
        else math.nan,
        **{f"failures/{name}": float(count) for name, count in sorted(failures.items())},
    }
    return {prefix + name: value for name, value in metrics.items() if not math.isnan(value)}
