"""`agent_trajectory_groups`: a user's own agent (the plain `openai` client, pointed at its episode's
gateway) gathered by ART into trajectory groups, each trajectory rebuilt from what the gateway recorded:
the sampled turn is a `Choice` whose logprobs carry the sampled ids as `token_id:<id>`, the same ids and
logprobs the gym stored as the episode's sample, and the reward is the gym's."""

from __future__ import annotations

import asyncio

import art
import httpx
from conftest import Policy
from gym_servers import Gym
from openai import AsyncOpenAI
from openai.types.chat.chat_completion import Choice

from gym_trainer.agents import AgentEpisode, GatewayConfig
from gym_trainer.art import agent_trajectory_groups
from gym_trainer.client import GymClient
from gym_trainer.episodes import EpisodeSpec


async def one_call_agent(episode: AgentEpisode) -> None:
    """An agent with its own (here: no) tool execution: one answer, scored by the gym's verifier."""
    # closed in this loop: collected unclosed, the client schedules its close on whatever loop runs then
    async with AsyncOpenAI(base_url=episode.base_url, api_key=episode.api_key) as client:
        await client.chat.completions.create(
            model=episode.model, messages=episode.prompt, tools=episode.tools, max_tokens=48, temperature=1.0
        )


def test_a_users_agent_gathered_by_art_carries_the_gateways_tokens(gym: Gym, policy: Policy) -> None:
    task = policy.tasks[0]
    spec = EpisodeSpec("counter", task=task["task"], seed=task["seed"])
    config = GatewayConfig(upstream=policy.url, model=policy.name, run="art-agents")

    async def gather() -> list[art.TrajectoryGroup]:
        async with GymClient(gym.url) as client:
            return await agent_trajectory_groups(client, one_call_agent, [spec], 2, config)

    (group,) = asyncio.run(gather())
    assert len(group) == 2 and not group.exceptions
    for trajectory in group:
        session = str(trajectory.metadata["gym_session_id"])
        stored = gym.stored(session, "completed")
        assert trajectory.reward == stored["reward"] and stored["reward"] is not None
        samples = httpx.get(f"{gym.url}/v1/rollouts/{session}/samples").json()
        (sample,) = samples["samples"]
        *messages, choice = trajectory.messages_and_choices
        assert isinstance(choice, Choice) and choice.logprobs is not None and choice.logprobs.content
        assert [m["role"] for m in messages] == [m["role"] for m in stored["messages"][: len(messages)]]
        ids = [int(entry.token.split(":")[1]) for entry in choice.logprobs.content]
        assert ids == sample["completion_ids"] and sample["mask"] == [1] * len(ids)
        assert [entry.logprob for entry in choice.logprobs.content] == sample["logprobs"]
        assert trajectory.metrics["gym_calls"] == 1 and trajectory.additional_histories == []
