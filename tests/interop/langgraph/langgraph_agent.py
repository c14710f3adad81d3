"""The agent a LangGraph user already has: `create_react_agent` over `ChatOpenAI` and the tools
langchain-mcp-adapters loads from an MCP server. Only the two URLs (and the key's headers) come from the
gym's episode; the peer's tests play it (test_langgraph_agent.py) and train it (test_langgraph_training.py)
unchanged."""

from __future__ import annotations

import openai
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

from gym_trainer.agents import AgentEpisode, AgentFn

__all__ = ["langgraph_agent"]


def langgraph_agent(streaming: bool) -> AgentFn:
    """The agent as `play_agent` and `AgentRolloutFunc` call it; `streaming`: ChatOpenAI's own switch."""

    async def agent(episode: AgentEpisode) -> None:
        mcp = MultiServerMCPClient(
            {"env": {"transport": "streamable_http", "url": episode.mcp_url, "headers": episode.headers}}
        )
        tools = await mcp.get_tools()
        # The episode's own HTTP client, closed in this event loop: ChatOpenAI's default one is cached
        # process-wide, and a cached client whose connections belong to an earlier test's closed loop
        # fails when reused or collected ("Event loop is closed").
        async with openai.DefaultAsyncHttpxClient() as http:
            model = ChatOpenAI(
                model=episode.model,
                base_url=episode.base_url,
                api_key=episode.api_key,
                temperature=1.0,
                max_completion_tokens=64,
                streaming=streaming,
                http_async_client=http,
            )
            graph = create_react_agent(model, tools)
            await graph.ainvoke({"messages": episode.prompt}, {"recursion_limit": 12})

    return agent
