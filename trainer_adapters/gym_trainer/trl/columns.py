"""The dict a TRL `rollout_func` returns, built one way for the gym's driver and for a user's agent.

TRL reads one list per key, one entry per generation: the token columns it trains on (`prompt_ids`,
`completion_ids`, `logprobs`, `env_mask`) and any other key, which it passes to reward functions as
keyword arguments (`gym_reward` and the rest, read by `trl.reward`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Episode", "TrlRow", "rollout_columns"]


class Episode(Protocol):
    """What both rollout kinds (the driver's `Rollout`, an agent's `AgentRollout`) say of an episode."""

    @property
    def reward(self) -> float | None: ...
    @property
    def components(self) -> dict[str, float]: ...
    @property
    def failure(self) -> str | None: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def task_id(self) -> str | None: ...


@dataclass(frozen=True)
class TrlRow:
    """One generation: its token columns, its episode and the adapter's own extra columns."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    episode: Episode
    extra: dict[str, Any]


def rollout_columns(rows: Sequence[TrlRow], *, eos: int) -> dict[str, list[Any]]:
    """TRL's columns for `rows`, every row with the same `extra` keys.

    A row without completion tokens (the episode failed before the model spoke) gets one masked
    end-of-turn token: TRL needs at least one, and a masked token carries no gradient.
    """
    columns: dict[str, list[Any]] = {}
    for row in rows:
        completion_ids, logprobs, mask = row.completion_ids, row.logprobs, row.env_mask
        if not completion_ids:
            completion_ids, logprobs, mask = [eos], [0.0], [0]
        episode = row.episode
        values = {
            "prompt_ids": row.prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": logprobs,
            "env_mask": mask,
            "gym_reward": episode.reward,
            "gym_components": episode.components,
            "gym_failure": episode.failure,
            "gym_session_id": episode.session_id,
            "gym_task_id": episode.task_id,
            **row.extra,
        }
        for key, value in values.items():
            columns.setdefault(key, []).append(value)
    return columns
