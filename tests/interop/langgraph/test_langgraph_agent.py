"""An unmodified LangGraph agent (langgraph_agent.py: `create_react_agent` over `ChatOpenAI` and
langchain-mcp-adapters' tools) plays gym episodes through the episode gateway and the episode's MCP URL;
the gym's trainer-side helper (`play_agent`) opens and scores them.

What the framework does, and what the gym must survive: `MultiServerMCPClient.get_tools()` opens a new
MCP session for every tool call (the episode lives in the URL, not the session), the 1.x MCP client
drops the initialize result's `_meta`, and nothing reads `done` or `reward` from a tool result: the
episode's end reaches the graph as the tool result's text, then as the gateway's final assistant message
(no tool call), which ends the ReAct loop.
"""

from __future__ import annotations

import pytest
from agent_gyms import Policy, play_checked
from conftest import Gym
from langgraph_agent import langgraph_agent

from gym_trainer.episodes import EpisodeSpec

pytestmark = pytest.mark.anyio


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
