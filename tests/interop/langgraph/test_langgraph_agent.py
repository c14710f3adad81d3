"""An unmodified LangGraph agent (`create_react_agent` over `ChatOpenAI` and langchain-mcp-adapters'
tools) plays gym episodes through the episode gateway and the episode's MCP URL; the gym's trainer-side
helper (`play_agent`) opens and scores them.

What the framework does, and what the gym must survive: `MultiServerMCPClient.get_tools()` opens a new
MCP session for every tool call (the episode lives in the URL, not the session), the 1.x MCP client
drops the initialize result's `_meta`, and nothing reads `done` or `reward` from a tool result: the
episode's end reaches the graph as the tool result's text, then as the gateway's final assistant message
(no tool call), which ends the ReAct loop.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_gyms import Policy, play_checked
from conftest import Gym
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

from gym_server.trainer_adapters.agents import AgentEpisode
from gym_server.trainer_adapters.episodes import EpisodeSpec

pytestmark = pytest.mark.anyio


def langgraph_agent(streaming: bool) -> Any:
    """The agent a LangGraph user already has; only the two URLs come from the episode."""

    async def agent(episode: AgentEpisode) -> None:
        mcp = MultiServerMCPClient(
            {"env": {"transport": "streamable_http", "url": episode.mcp_url, "headers": episode.headers}}
        )
        tools = await mcp.get_tools()
        model = ChatOpenAI(
            model=episode.model,
            base_url=episode.base_url,
            api_key=episode.api_key,
            temperature=1.0,
            max_completion_tokens=64,
            streaming=streaming,
        )
        graph = create_react_agent(model, tools)
        await graph.ainvoke({"messages": episode.prompt}, {"recursion_limit": 12})

    return agent


async def test_a_langgraph_agent_plays_counter_token_exactly(gym: Gym, policy: Policy) -> None:
    task = policy.tasks[0]
    row = await play_checked(
        gym,
        policy,
        langgraph_agent(False),
        EpisodeSpec("counter", task=task["task"], seed=task["seed"]),
        streamed=False,
        run="interop-langgraph",
    )
    assert row["done_reason"] is not None  # ended through the environment's own `submit`


async def test_a_streaming_langgraph_agent_plays_workplace(gym: Gym, policy: Policy) -> None:
    await play_checked(
        gym,
        policy,
        langgraph_agent(True),
        EpisodeSpec("workplace", task_id="workplace-00000", seed=0),
        streamed=True,
        run="interop-langgraph",
    )
