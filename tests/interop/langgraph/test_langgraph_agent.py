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

import json
import urllib.request
from typing import Any

import pytest
from agent_gyms import Policy, assert_native_reward, assert_token_exact
from conftest import Gym
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

from gym_server.trainer_adapters.agents import AgentEpisode, GatewayConfig, play_agent
from gym_server.trainer_adapters.client import GymClient
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


def samples_of(gym: Gym, session_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{gym.url}/v1/rollouts/{session_id}/samples", timeout=30) as response:
        return dict(json.loads(response.read()))


async def play(gym: Gym, policy: Policy, spec: EpisodeSpec, streaming: bool) -> dict[str, Any]:
    """One episode; returns the stored row after checking tokens and reward."""
    policy.proxy.take()
    config = GatewayConfig(upstream=policy.upstream, model=policy.name, run="interop-langgraph")
    async with GymClient(gym.url) as client:
        result = await play_agent(client, langgraph_agent(streaming), spec, config)
    calls = policy.proxy.take()
    assert result.failure is None and result.reward is not None, result.error
    assert all(call.stream is streaming for call in calls)
    report = samples_of(gym, result.session_id or "")
    assert_token_exact(report, calls)
    assert [s["completion_ids"] for s in report["samples"]] == [s.completion_ids for s in result.samples]
    row = gym.stored(result.session_id or "", "completed")
    assert assert_native_reward(gym, row, spec.task) == result.reward
    # Every tool call that reached the environment is one the policy sampled, in order.
    # (LangGraph's tool node answers a call of an unknown tool itself; the episode ends at `submit`.)
    known = {tool["function"]["name"] for tool in row["tools"]}
    executed = [c["function"]["name"] for m in row["messages"] for c in m.get("tool_calls") or []]
    sampled = [c["name"] for call in calls for c in call.tool_calls if c["name"] in known]
    assert executed and executed == sampled[: len(executed)]
    return row


async def test_a_langgraph_agent_plays_counter_token_exactly(gym: Gym, policy: Policy) -> None:
    task = policy.tasks[0]
    row = await play(gym, policy, EpisodeSpec("counter", task=task["task"], seed=task["seed"]), False)
    assert row["done_reason"] is not None  # ended through the environment's own `submit`


async def test_a_streaming_langgraph_agent_plays_workplace(gym: Gym, policy: Policy) -> None:
    await play(gym, policy, EpisodeSpec("workplace", task_id="workplace-00000", seed=0), True)
