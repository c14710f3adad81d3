"""What a driver plays and what it hands back: the episode spec, the budgets, the finished `Rollout`
(token ids, logprobs, loss mask, reward, transcript) and `summarize` over many of them. Kept apart from
the driver so readers of rollouts (CLI, server-driven runs, benchmarks) need not know how they are
played; `driver` re-exports every name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_trainer.samplers.base import SamplingParams

__all__ = ["CLIENT_FAILURES", "DriverConfig", "EpisodeSpec", "Rollout", "summarize"]

# Failure classes the client reports when closing (the gym knows its own: budgets, verifier errors).
CLIENT_FAILURES = frozenset({"policy_error", "policy_timeout"})


@dataclass(frozen=True, slots=True)
class DriverConfig:
    """Budgets and sampling of every episode a driver plays.

    Args:
        max_completion_tokens: model plus environment tokens after the prompt (TRL's
            `max_completion_length`); the episode ends when the next turn or reply would not fit.
        max_turns: assistant turns per episode (the gym may end it sooner).
        sampling: per-turn sampling; `seed`, when set, is offset per episode and turn.
        run: the gym `run` every trajectory is filed under.
        send_turn_data: store token ids and logprobs with each step.
        for_training: refuse samplers that are not token-exact.
        tool_format: how the policy writes tool calls (`toolcalls.FORMATS`); "auto" detects the
            format per turn, or uses the tokenizer's own response template when it declares one.
    """

    max_completion_tokens: int = 1024
    max_turns: int = 8
    sampling: SamplingParams = field(default_factory=SamplingParams)
    run: str | None = None
    ttl_s: float | None = None
    send_turn_data: bool = True
    for_training: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)
    tool_format: str = "auto"


@dataclass(frozen=True, slots=True)
class EpisodeSpec:
    """Which task to play: a dataset id or an inline task, with the gym seed of its start state."""

    env: str
    task_id: str | None = None
    task: dict[str, Any] | None = None
    seed: int | None = None
    sample_seed: int | None = None


@dataclass(slots=True)
class Rollout:
    """One finished episode, ready for a trainer: token-level fields plus the gym's verdict."""

    env: str
    task_id: str | None
    seed: int | None
    session_id: str | None = None
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    reward: float | None = None
    components: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    stop_reason: str = "done"
    num_turns: int = 0
    parse_errors: int = 0
    transcript: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    turn_texts: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=lambda: {"sample_ms": 0.0, "env_ms": 0.0})
    error: str | None = None
    # Where each turn's sampling began in `completion_ids` (a turn forked at starts from there).
    turn_starts: list[int] = field(default_factory=list)
    # A branch of a tree group (`trainer_adapters.tree`): the episode it was forked from, the turn and
    # the index in `completion_ids` where its own tokens begin (before it: the parent's, shared with
    # its siblings), how the gym rebuilt the state (`copy` or `replay`) and the environment steps it
    # re-ran on the server to do so (a replay: the branch turn's steps; copies: one replay a request).
    parent_session_id: str | None = None
    branch_turn: int | None = None
    branch_token: int = 0
    fork_mode: str | None = None
    replayed_steps: int = 0

    @property
    def model_tokens(self) -> int:
        return sum(self.env_mask)

    @property
    def generated_tokens(self) -> int:
        """Tokens this sample's policy calls generated: a branch's own, not the prefix it shares."""
        return sum(self.env_mask[self.branch_token :])

    @property
    def env_steps(self) -> int:
        """Environment steps this sample's driver sent (a branch's own turns)."""
        return self.num_turns - (self.branch_turn or 0)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def summarize(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """Counts and means over episodes: success rate, mean reward (scored episodes only), endings."""
    scored = [r.reward for r in rollouts if r.reward is not None]
    stops: dict[str, int] = {}
    for rollout in rollouts:
        stops[rollout.stop_reason] = stops.get(rollout.stop_reason, 0) + 1
    components: dict[str, list[float]] = {}
    for rollout in rollouts:
        for name, value in rollout.components.items():
            components.setdefault(name, []).append(value)
    return {
        "episodes": len(rollouts),
        "scored": len(scored),
        "mean_reward": sum(scored) / len(scored) if scored else None,
        "success_rate": sum(1 for r in scored if r >= 1.0) / len(scored) if scored else None,
        "stop_reasons": dict(sorted(stops.items())),
        "failures": sum(1 for r in rollouts if r.failure),
        "parse_errors": sum(r.parse_errors for r in rollouts),
        "components": {name: sum(v) / len(v) for name, v in sorted(components.items())},
        "model_tokens": sum(r.model_tokens for r in rollouts),
    }
