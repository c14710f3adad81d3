"""An episode's own MCP URL (`/v1/sessions/{id}/mcp`, handed out with a gateway): any number of MCP
sessions, of the protocol versions `mcp` 1.x and 2.x clients speak, act on that one episode; its end is
said in the tool results' text and a call after it is a tool error; the gateway answers a chat call after
the end without calling upstream. Spoken to in raw JSON-RPC on the in-process app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import AppHarness, free_port, serving

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
OVER = "The episode is over (reward 1.0). Stop calling tools and give your final answer."


@pytest.fixture
async def gym(tmp_path: Path) -> AsyncIterator[AppHarness]:
    async with serving(tmp_path) as harness:
        yield harness


async def open_episode(gym: AppHarness) -> dict[str, Any]:
    # Nothing listens on the upstream's port: no test here reaches it.
    gateway = {"upstream": f"http://127.0.0.1:{free_port()}/v1", "model": "tiny"}
    body = {"env": "counter", "task_id": "counter-0000", "seed": 0, "gateway": gateway}
    created = await gym.client.post("/v1/sessions", json=body)
    assert created.status_code == 201, created.text
    return dict(created.json())


class Mcp:
    """One MCP session on an episode URL."""

    def __init__(self, gym: AppHarness, url: str, version: str) -> None:
        self.gym, self.url, self.version, self.mcp_id, self.next_id = gym, url, version, "", 1

    async def open(self) -> dict[str, Any]:
        params = {
            "protocolVersion": self.version,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }
        answer = await self.gym.client.post(
            self.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params},
            headers=HEADERS,
        )
        assert answer.status_code == 200, answer.text
        self.mcp_id = answer.headers["mcp-session-id"]
        notified = await self.gym.client.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers
        )
        assert notified.status_code == 202
        return dict(answer.json()["result"])

    @property
    def headers(self) -> dict[str, str]:
        return {**HEADERS, "mcp-session-id": self.mcp_id, "mcp-protocol-version": self.version}

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        answer = await self.gym.client.post(self.url, json=body, headers=self.headers)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    async def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        return dict((await self.request("tools/call", {"name": name, "arguments": arguments}))["result"])

    async def close(self) -> None:
        assert (await self.gym.client.delete(self.url, headers=self.headers)).status_code == 200


async def one_call(gym: AppHarness, url: str, version: str, name: str, **arguments: Any) -> dict[str, Any]:
    """A call as langchain-mcp-adapters' `get_tools()` makes it: a fresh MCP session, closed after."""
    session = Mcp(gym, url, version)
    await session.open()
    result = await session.call(name, **arguments)
    await session.close()
    return result


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", "2025-11-25"])
async def test_every_mcp_session_on_the_url_plays_the_same_episode(gym: AppHarness, version: str) -> None:
    episode = await open_episode(gym)
    url = episode["gateway"]["mcp_url"]
    first = Mcp(gym, url, version)
    await first.open()
    listed = (await first.request("tools/list"))["result"]["tools"]
    assert [tool["name"] for tool in listed] == [tool["function"]["name"] for tool in episode["tools"]]
    assert (await first.call("add", amount=10))["isError"] is False
    await first.close()  # ends the MCP session only
    assert (await one_call(gym, url, version, "read"))["content"][0]["text"] == "30"  # it starts at 20
    assert (await one_call(gym, url, version, "add", amount=-4))["isError"] is False

    submitted = await one_call(gym, url, version, "submit")
    assert submitted["isError"] is False and submitted["content"][0]["text"].endswith(OVER)
    assert submitted["_meta"]["gym-server/episode"]["done"] is True
    after = await one_call(gym, url, version, "add", amount=1)
    assert after["isError"] is True and after["content"][0]["text"] == OVER

    state = (await gym.client.get(f"/v1/sessions/{episode['session_id']}")).json()
    assert (
        state["status"] == "live" and state["done"] is True and state["turns"] == 4
    )  # add, read, add, submit
    assert state["reward"] == 1.0


async def test_after_the_end_the_gateway_says_so_without_calling_upstream(gym: AppHarness) -> None:
    episode = await open_episode(gym)
    url, base = episode["gateway"]["mcp_url"], episode["gateway"]["base_url"]
    await one_call(gym, url, "2025-11-25", "add", amount=6)  # 20 -> 26
    await one_call(gym, url, "2025-11-25", "submit")
    body = {"model": "x", "messages": [{"role": "user", "content": "go on"}]}
    answer = (await gym.client.post(f"{base}/chat/completions", json=body)).json()
    assert answer["choices"][0]["message"]["content"] == "The episode is over (reward 1.0)."
    assert answer["choices"][0]["finish_reason"] == "stop"
    streamed = await gym.client.post(f"{base}/chat/completions", json={**body, "stream": True})
    assert streamed.status_code == 200 and "The episode is over (reward 1.0)." in streamed.text
    assert streamed.text.rstrip().endswith("data: [DONE]")

    assert (await gym.client.delete(f"/v1/sessions/{episode['session_id']}")).status_code == 204
    record = (await gym.client.get(f"/v1/rollouts/{episode['session_id']}")).json()
    assert record["status"] == "completed" and record["reward"] == 1.0
    assert [turn for turn in record["turns"] if turn.get("source") == "gateway"] == []  # nothing recorded
    assert record["metadata"]["gateway"]["num_calls"] == 0 and "api_key" not in str(record["metadata"])


async def test_an_unknown_or_closed_episode_url_is_refused(gym: AppHarness) -> None:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    unknown = await gym.client.post("/v1/sessions/nope/mcp", json=initialize, headers=HEADERS)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == -32600
    episode = await open_episode(gym)
    assert (await gym.client.delete(f"/v1/sessions/{episode['session_id']}")).status_code == 204
    closed = await gym.client.post(episode["gateway"]["mcp_url"], json=initialize, headers=HEADERS)
    assert closed.status_code == 410 and "start a new session" in closed.json()["error"]["message"]
