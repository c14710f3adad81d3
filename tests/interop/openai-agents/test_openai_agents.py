"""An unmodified OpenAI Agents SDK agent (`Agent` with `OpenAIChatCompletionsModel` and
`MCPServerStreamableHttp`) plays gym episodes through the episode gateway and the episode's MCP URL; the
gym's trainer-side helper (`play_agent`) opens and scores them.

What the SDK does, and what the gym must survive: it never reads `done` or `reward` from a tool result's
`_meta`, so the episode's end reaches it as the tool result's text and then as the gateway's final
assistant message without a tool call, which ends `Runner.run` with a final output; a call of a tool the
server does not list is answered by the SDK itself ("Tool 'x' not found."), never sent to the gym.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_gyms import Policy, play_checked
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from conftest import Gym
from openai import AsyncOpenAI

from gym_trainer.agents import AgentEpisode
from gym_trainer.episodes import EpisodeSpec

pytestmark = pytest.mark.anyio

set_tracing_disabled(True)  # the SDK's default exporter would call api.openai.com


def sdk_agent(streamed: bool) -> Any:
    """The agent an Agents SDK user already has; only the two URLs come from the episode."""

    async def agent(episode: AgentEpisode) -> None:
        system = "\n".join(m["content"] for m in episode.prompt if m["role"] == "system")
        turns = [
            {"role": m["role"], "content": m["content"]} for m in episode.prompt if m["role"] != "system"
        ]
        params = {"url": episode.mcp_url, "headers": episode.headers, "timeout": 60}
        tools = MCPServerStreamableHttp(params, cache_tools_list=True, client_session_timeout_seconds=60)
        # Closed here, in this episode's event loop: an unclosed AsyncOpenAI schedules its own close when
        # collected, on whatever loop then runs, which then touches this loop's closed sockets ("Event loop
        # is closed", failing a later test at random: CI rehearsal 2026-12-07).
        client = AsyncOpenAI(base_url=episode.base_url, api_key=episode.api_key)
        async with client, tools as env:
            agent = Agent(
                name="player",
                instructions=system,
                model=OpenAIChatCompletionsModel(episode.model, client),
                model_settings=ModelSettings(temperature=1.0, max_tokens=64),
                mcp_servers=[env],
            )
            if streamed:
                run = Runner.run_streamed(agent, turns, max_turns=12)
                async for _ in run.stream_events():
                    pass
            else:
                await Runner.run(agent, turns, max_turns=12)

    return agent


async def test_an_agents_sdk_agent_plays_counter_token_exactly(gym: Gym, policy: Policy) -> None:
    task = policy.tasks[0]
    row = await play_checked(
        gym,
        policy,
        sdk_agent(False),
        EpisodeSpec("counter", task=task["task"], seed=task["seed"]),
        streamed=False,
        run="interop-openai-agents",
    )
    assert row["done_reason"] is not None  # ended through the environment's own `submit`


async def test_a_streamed_agents_sdk_run_plays_workplace(gym: Gym, policy: Policy) -> None:
    await play_checked(
        gym,
        policy,
        sdk_agent(True),
        EpisodeSpec("workplace", task_id="workplace-00000", seed=0),
        streamed=True,
        run="interop-openai-agents",
    )
