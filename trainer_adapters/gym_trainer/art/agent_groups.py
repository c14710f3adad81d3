"""ART trajectory groups of a user's own agent: each trajectory is one gym episode the agent played
through its episode gateway (`trainer_adapters.agents.play_agent`).

ART's loop is `groups = await art.gather_trajectory_groups(art.TrajectoryGroup(rollout(...) for _ in
range(n)) for scenario in scenarios)`, then `await model.train(groups)`. Here the rollout is the user's
agent, unchanged but for its base (and MCP) URL, and the trajectory is rebuilt from what the gateway
recorded: each assistant turn the policy sampled becomes an OpenAI `Choice` whose logprobs carry the
sampled ids as `token_id:<id>` tokens (vLLM's `return_tokens_as_token_ids` form, which ART reads back as
exact ids), the rest are plain messages as the agent sent them. An episode split into several samples
(a chat template rewrote history) gives one history per sample: the last is the trajectory's
`messages_and_choices`, the earlier ones its `additional_histories`, ART's place for them.

An episode without signal (the agent raised, the policy failed) raises `GymEpisodeFailed`, which ART
keeps in `group.exceptions`, as `gym_rollout` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import art
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob

from gym_trainer.agents import AgentFn, AgentRollout, GatewayConfig, play_agent
from gym_trainer.art.rollout import GymEpisodeFailed
from gym_trainer.client import GymClient
from gym_trainer.episodes import EpisodeSpec

__all__ = ["agent_trajectory", "agent_trajectory_groups"]

GATEWAY = "gateway"  # the `source` of the gateway's entries in a stored episode's `turns`


def _choice(call: dict[str, Any]) -> Choice:
    """A recorded call's answer as the `Choice` ART trains on, its sampled ids in the logprobs."""
    content = [
        ChatCompletionTokenLogprob(token=f"token_id:{token}", logprob=logprob, bytes=None, top_logprobs=[])
        for token, logprob in zip(call["completion_ids"], call["logprobs"], strict=True)
    ]
    finish = call.get("finish_reason") or "stop"
    return Choice(
        index=0,
        finish_reason=finish if finish in ("stop", "length", "tool_calls") else "stop",
        message=ChatCompletionMessage.model_validate({"role": "assistant", **(call.get("response") or {})}),
        logprobs=ChoiceLogprobs(content=content),
    )


def _history(calls: list[dict[str, Any]]) -> list[Any]:
    """One sample's calls as messages and choices: the last call's request, with the assistant turns the
    earlier calls sampled put back as their `Choice`s, then the last call's own `Choice`."""
    last = calls[-1]
    messages = list(last.get("messages") or [])
    opening = len(calls[0].get("messages") or [])
    earlier = [i for i in range(opening, len(messages)) if messages[i].get("role") == "assistant"]
    if len(earlier) == len(calls) - 1:  # the framework echoed every sampled turn back, in order
        for position, call in zip(earlier, calls, strict=False):
            messages[position] = _choice(call)
    return [*messages, _choice(last)]


def _trajectory(rollout: AgentRollout, row: dict[str, Any]) -> art.Trajectory:
    calls = {turn["call"]: turn for turn in row.get("turns") or [] if turn.get("source") == GATEWAY}
    histories = [_history([calls[i] for i in sample.calls]) for sample in rollout.samples]
    tools = row.get("tools") or None
    return art.Trajectory(
        messages_and_choices=histories[-1] if histories else list(rollout.prompt),
        additional_histories=[{"messages_and_choices": h, "tools": tools} for h in histories[:-1]],
        tools=tools,
        reward=float(rollout.reward or 0.0),
        metrics={
            "gym_calls": rollout.num_calls,
            "gym_samples": len(rollout.samples),
            "gym_masked_share": rollout.masked_share,
            **{f"gym_{name}": value for name, value in rollout.components.items()},
        },
        metadata={
            "gym_env": rollout.spec.env,
            "gym_task_id": rollout.task_id,
            "gym_session_id": rollout.session_id,
            "gym_failure": rollout.failure,
        },
    )


async def agent_trajectory(
    gym: GymClient, agent: AgentFn, spec: EpisodeSpec, config: GatewayConfig, *, api_key: str | None = None
) -> art.Trajectory:
    """Play one episode with the user's `agent` and return it as an `art.Trajectory`.

    Raises:
        GymEpisodeFailed: the episode has no reward (its `failure` says why).
    """
    rollout = await play_agent(gym, agent, spec, config, api_key=api_key)
    if rollout.reward is None:
        partial = art.Trajectory(
            messages_and_choices=list(rollout.prompt),
            reward=0.0,
            metadata={"gym_session_id": rollout.session_id, "gym_failure": rollout.failure},
        )
        raise GymEpisodeFailed(rollout.failure or "no_reward", rollout.error or "", partial)
    row = await gym.get_rollout(rollout.session_id or "")
    return _trajectory(rollout, row).finish()


async def agent_trajectory_groups(
    gym: GymClient,
    agent: AgentFn,
    specs: Iterable[EpisodeSpec],
    group_size: int,
    config: GatewayConfig,
    *,
    api_key: str | None = None,
    max_exceptions: int | float = 1.0,
    pbar_desc: str | None = "gym-agent",
) -> list[art.TrajectoryGroup]:
    """`group_size` runs of the user's agent per spec (same task and gym seed), gathered by ART's
    `gather_trajectory_groups`; failed episodes land in each group's `exceptions`."""
    return list(
        await art.gather_trajectory_groups(
            (
                art.TrajectoryGroup(
                    agent_trajectory(gym, agent, spec, config, api_key=api_key) for _ in range(group_size)
                )
                for spec in specs
            ),
            pbar_desc=pbar_desc,
            max_exceptions=max_exceptions,
        )
    )
