"""A user's agent as the suite's agent tests run it (tests/trainer_adapters/test_agents.py): a ReAct loop
(model node, tools node, repeat) written with the plain `openai` client and the `mcp` client, the shape a
LangGraph `create_react_agent` graph has (the graph itself is trained in tests/interop/langgraph, whose
venv holds LangGraph's `mcp<2`).
It knows nothing of the gym but the two URLs the episode hands it: the chat model's base URL and the MCP
URL of the environment's tools. It stops when the model answers without a tool call (the gateway ends the
conversation that way once the episode is over) or after `MAX_ROUNDS`, like a framework's step limit."""

from __future__ import annotations

import json
from typing import Any

from mcp.client.client import Client
from openai import AsyncOpenAI

from gym_trainer.agents import AgentEpisode

MAX_ROUNDS = 6


async def react_agent(episode: AgentEpisode) -> None:
    model = AsyncOpenAI(base_url=episode.base_url, api_key=episode.api_key)
    async with Client(episode.mcp_url) as mcp:
        tools: list[Any] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in (await mcp.list_tools()).tools
        ]
        messages: list[Any] = list(episode.prompt)
        for _ in range(MAX_ROUNDS):
            answer = await model.chat.completions.create(
                model=episode.model, messages=messages, tools=tools, max_tokens=64, temperature=1.0
            )
            message = answer.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return
            for call in message.tool_calls:
                if call.type != "function":
                    continue
                try:
                    arguments = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                result = await mcp.call_tool(call.function.name, arguments)
                text = "".join(getattr(part, "text", "") for part in result.content)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
