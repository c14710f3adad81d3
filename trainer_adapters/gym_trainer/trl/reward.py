"""Reward functions for TRL that read the gym's verdict instead of scoring text themselves.

The gym already verified every episode (`GymRolloutFunc` returns `gym_reward` per sample); re-scoring
the decoded completion in the trainer would duplicate the verifier and could disagree with it. A
sample without signal (policy or gym failure, a verifier timeout) is `None`, which TRL turns into NaN
and excludes from the group baseline, so it is never trained on as a zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["gym_component_reward", "gym_reward"]


def gym_reward(
    prompts: list[Any], completions: list[Any], gym_reward: list[float | None] | None = None, **kwargs: Any
) -> list[float | None]:
    """The gym's episode reward for each sample (`None`: no signal)."""
    if gym_reward is None:
        raise ValueError("gym_reward needs GymRolloutFunc as the trainer's rollout_func")
    return [None if value is None else float(value) for value in gym_reward]


def gym_component_reward(name: str) -> Callable[..., list[float | None]]:
    """A reward function for one verifier component (e.g. to log it, or weight it separately)."""

    def component(
        prompts: list[Any],
        completions: list[Any],
        gym_components: list[dict[str, float]] | None = None,
        gym_failure: list[str | None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        comps = gym_components or [{} for _ in prompts]
        failures = gym_failure or [None for _ in prompts]
        return [
            None if failure else float(values.get(name, 0.0))
            for values, failure in zip(comps, failures, strict=True)
        ]

    component.__name__ = f"gym_{name}"
    return component
