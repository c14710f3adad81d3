"""The real `mcp` client (2.3.0: `streamable_http_client` + `ClientSession`, and `Client`) acting inside
gym episodes through `/v1/environments/{env}/mcp`, checked against the gym's native API and store."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from conftest import Gym
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, CallToolResult, InitializeResult

pytestmark = pytest.mark.anyio

EPISODE = "gym-server/episode"


@asynccontextmanager
async def episode(
    url: str,
) -> AsyncIterator[tuple[ClientSession, InitializeResult]]:
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write) as session,
    ):
        yield session, await session.initialize()


def session_id(init: InitializeResult) -> str:
    assert init.meta is not None
    return str(init.meta[EPISODE]["session_id"])


def state(result: CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    return dict(result.meta[EPISODE])


def text(result: CallToolResult) -> str:
    (content,) = result.content
    assert content.type == "text"
    return content.text


@pytest.mark.parametrize("env", ["counter", "workplace"])
async def test_tools_list_is_the_environments_tools(gym: Gym, env: str) -> None:
    _, catalog = gym.get(f"/v1/environments/{env}")
    async with episode(gym.mcp_url(env, seed=1)) as (session, init):
        tools = (await session.list_tools()).tools
        assert [tool.name for tool in tools] == [schema["function"]["name"] for schema in catalog["tools"]]
        for tool, schema in zip(tools, catalog["tools"], strict=True):
            assert tool.description == schema["function"]["description"]
            assert tool.input_schema == {"type": "object", **schema["function"]["parameters"]}
        assert init.meta is not None and init.meta[EPISODE]["env"] == env
        assert (
            init.instructions is not None
            and init.meta[EPISODE]["messages"][-1]["content"] in init.instructions
        )


async def test_an_episode_played_to_done_is_rewarded_and_stored_step_by_step(gym: Gym) -> None:
    url = gym.mcp_url("counter", task_id="counter-0000", seed=0, run="interop-mcp")
    async with episode(url) as (session, init):
        gym_id = session_id(init)
        assert init.instructions is not None
        target = int(re.search(r"Bring the counter to (-?\d+)", init.instructions).group(1))  # type: ignore[union-attr]
        add = next(tool for tool in (await session.list_tools()).tools if tool.name == "add")
        assert add.input_schema["properties"]["amount"]["type"] == "integer"
        value = int(text(await session.call_tool("read", {})))
        calls = ["read"]
        while value != target:
            result = await session.call_tool("add", {"amount": max(-10, min(10, target - value))})
            assert not result.is_error and state(result)["done"] is False
            value = int(text(result))
            calls.append("add")
        done = await session.call_tool("submit", {})
        calls.append("submit")
        assert state(done)["done"] is True and state(done)["reward"] == 1.0
        code, live = gym.get(f"/v1/sessions/{gym_id}")
        assert code == 200 and live["status"] == "live" and live["turns"] == len(calls)
    # Leaving the client sends the DELETE: the episode is closed and stored.
    stored = gym.stored(gym_id, "completed")
    assert stored["reward"] == 1.0 and stored["run"] == "interop-mcp" and stored["num_turns"] == len(calls)
    stepped = [m["tool_calls"][0]["function"]["name"] for m in stored["messages"] if m["role"] == "assistant"]
    assert stepped == calls
    replies = [m["content"] for m in stored["messages"] if m["role"] == "tool"]
    assert replies[-1] == f"submitted {target}"


async def test_bad_arguments_and_an_unknown_tool_are_mcp_errors_and_the_episode_goes_on(gym: Gym) -> None:
    async with episode(gym.mcp_url("counter", task_id="counter-0001", seed=0)) as (session, init):
        gym_id = session_id(init)
        bad = await session.call_tool("add", {"amount": "ten"})
        assert bad.is_error and "invalid arguments for 'add'" in text(bad)
        assert state(bad)["done"] is False
        extra = await session.call_tool("add", {"amount": 1, "by": 2})
        assert extra.is_error and "by" in text(extra)
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("multiply", {"by": 2})
        assert unknown.value.code == INVALID_PARAMS and "unknown tool 'multiply'" in unknown.value.message
        fine = await session.call_tool("read", {})
        assert not fine.is_error and text(fine).lstrip("-").isdigit()
        _, live = gym.get(f"/v1/sessions/{gym_id}")
        assert (
            live["turns"] == 3
        )  # two refused argument sets are steps (tool messages); the unknown tool is not
    stored = gym.stored(gym_id, "abandoned")
    assert [m["content"].startswith("Error:") for m in stored["messages"] if m["role"] == "tool"] == [
        True,
        True,
        False,
    ]


async def test_a_finished_episode_refuses_more_calls_in_mcp_error_form(gym: Gym) -> None:
    async with episode(gym.mcp_url("counter", task_id="counter-0002", seed=0)) as (session, _):
        await session.call_tool("submit", {})
        with pytest.raises(MCPError) as finished:
            await session.call_tool("read", {})
        assert finished.value.code == INVALID_REQUEST and "finished" in finished.value.message


async def test_at_capacity_a_second_mcp_session_is_refused_clearly(gym_with: Any) -> None:
    gym: Gym = gym_with(GYM_SESSIONS__MAX_SESSIONS="1", GYM_SESSIONS__RETRY_AFTER_S="3")
    async with episode(gym.mcp_url("counter", seed=1)) as (session, _):
        async with (
            streamable_http_client(gym.mcp_url("counter", seed=2)) as (read, write),
            ClientSession(read, write) as second,
        ):
            with pytest.raises(MCPError) as refused:
                await second.initialize()
        assert "maximum of 1 live sessions" in refused.value.message
        assert refused.value.data["status"] == 429 and refused.value.data["retry_after_s"] == 3
        assert not (await session.call_tool("read", {})).is_error  # the first episode is untouched
    async with episode(gym.mcp_url("counter", seed=2)) as (_, init):  # its slot is free again
        assert session_id(init)


CLIENT = """
import sys, time, anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main() -> None:
    async with streamable_http_client(sys.argv[1]) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            await session.call_tool("read", {})
            print(init.meta["gym-server/episode"]["session_id"], flush=True)
            await anyio.sleep(3600)

anyio.run(main)
"""


def test_a_client_that_disconnects_leaves_a_stored_trajectory(gym_with: Any) -> None:
    gym: Gym = gym_with(GYM_SESSIONS__DEFAULT_TTL_S="1", GYM_SESSIONS__REAP_INTERVAL_S="0.1")
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, gym.mcp_url("counter", seed=5)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout is not None
        gym_id = client.stdout.readline().strip()
        assert gym_id, "the client printed no session id"
    finally:
        os.kill(client.pid, signal.SIGKILL)  # gone without a DELETE, as a crashed harness goes
        client.wait()
    stored = gym.stored(gym_id, "expired")
    assert stored["failure"] == "expired" and stored["num_turns"] == 1


async def test_the_unified_client_falls_back_to_the_handshake_and_plays(gym: Gym) -> None:
    async with Client(gym.mcp_url("counter", seed=11)) as client:
        assert client.protocol_version == "2025-11-25"
        result = await client.call_tool("read", {})
        assert not result.is_error and state(result)["done"] is False
