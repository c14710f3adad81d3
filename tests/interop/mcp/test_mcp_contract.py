"""Two departures from MCP that the real `mcp` 2.3.0 client found, checked with it against a real gym.

- A tool call that ends the episode without a reply (the `tool_call` environment scores the call and
  never runs it) is a success: `isError` false, no content, the reward in `_meta`.
- An `initialize` the server refuses (no params: the SDK answers 200 with a JSON-RPC error) leaves
  nothing open: no `mcp-session-id`, no live gym session; on a gym holding one session, many such
  requests in a row still leave room for the real client's episode.
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from conftest import Gym
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

EPISODE = "gym-server/episode"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def test_a_call_that_ends_the_episode_without_a_reply_is_a_success(gym: Gym) -> None:
    url = gym.mcp_url("tool_call", task_id="tool_call-00001")
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.meta is not None
        session_id = init.meta[EPISODE]["session_id"]
        result = await session.call_tool("list_events", {"date": "2025-03-29"})
        assert result.is_error is False and result.content == []
        assert result.meta is not None
        assert (result.meta[EPISODE]["done"], result.meta[EPISODE]["reward"]) == (True, 1.0)
    stored = gym.stored(session_id, "completed")
    assert stored["reward"] == 1.0 and stored["failure"] is None


async def test_a_refused_initialize_leaves_nothing_open(gym_with: Any) -> None:
    gym: Gym = gym_with(GYM_SESSIONS__MAX_SESSIONS="1")
    url = gym.mcp_url("counter")
    async with httpx2.AsyncClient() as http:
        for _ in range(8):  # the eight; more than the SDK's own limit of 2 x max_sessions
            bare = {"jsonrpc": "2.0", "id": 1, "method": "initialize"}  # no params
            refused = await http.post(url, json=bare, headers=HEADERS)
            assert refused.json()["error"]["code"] == -32602
            assert "mcp-session-id" not in refused.headers
    code, stored = gym.get("/v1/rollouts")
    assert code == 200 and stored["total"] == 0, stored  # no episode was opened for them
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert (await session.call_tool("read", {})).is_error is False
