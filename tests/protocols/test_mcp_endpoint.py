"""The MCP endpoint in process, spoken to in raw JSON-RPC over streamable HTTP (JSON responses).

The real `mcp` client drives a real server in tests/interop/mcp (`make interop PEER=mcp`); these check
the gym's side of the mapping on the ASGI app: sessions opened, stepped, refused and closed.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import AppHarness, ServerProcess, serving
from gymtest import wait_for_rollout
from mcptest import COUNTER, HEADERS, INITIALIZE, VERSION, open_session, rpc

import gym_server.protocols.mcp as mcp_facade
from gym_server.app import create_app
from gym_server.core.settings import Settings
from gym_server.protocols.mcp import mapping as mcp_mapping


@pytest.fixture
async def gym(tmp_path: Path) -> AsyncIterator[AppHarness]:
    async with serving(tmp_path, sessions={"max_sessions": 2}) as harness:
        yield harness


async def test_an_episode_is_played_through_mcp_and_stored_like_a_native_one(gym: AppHarness) -> None:
    session = await open_session(gym.client, f"{COUNTER}?task_id=counter-0000&seed=0")
    meta = session.init["_meta"]["gym-server/episode"]
    assert (meta["env"], meta["task_id"], meta["seed"]) == ("counter", "counter-0000", 0)
    assert "Bring the counter to 26" in session.init["instructions"]
    assert session.init["capabilities"]["tools"] is not None

    listed = (await session.request("tools/list"))["result"]["tools"]
    assert [tool["name"] for tool in listed] == ["read", "add", "submit"]
    assert listed[1]["inputSchema"]["properties"]["amount"]["type"] == "integer"

    read = (await session.call("read"))["result"]
    assert read["content"] == [{"type": "text", "text": "20"}] and read["isError"] is False
    bad = (await session.call("add", {"amount": "six"}))["result"]
    assert bad["isError"] is True and "invalid arguments for 'add'" in bad["content"][0]["text"]
    unknown = await session.call("subtract", {"amount": 1})
    assert unknown["error"]["code"] == -32602 and "unknown tool 'subtract'" in unknown["error"]["message"]
    await session.call("add", {"amount": 6})
    submitted = (await session.call("submit"))["result"]
    episode = submitted["_meta"]["gym-server/episode"]
    assert (episode["done"], episode["reward"], episode["session_id"]) == (True, 1.0, session.gym_id)

    state = (await gym.client.get(f"/v1/sessions/{session.gym_id}")).json()
    assert state["status"] == "live" and state["turns"] == 4  # the unknown tool was no step
    calls = [m["tool_calls"][0]["function"]["name"] for m in state["messages"] if m["role"] == "assistant"]
    assert calls == ["read", "add", "add", "submit"]

    finished = await session.call("read")
    assert finished["error"]["code"] == -32600 and "finished" in finished["error"]["message"]

    deleted = await gym.client.delete(COUNTER, headers=session.headers)
    assert deleted.status_code == 200, deleted.text
    stored = await wait_for_rollout(gym.client, session.gym_id, "completed")
    assert stored["reward"] == 1.0 and stored["num_turns"] == 4
    gone = await gym.client.post(COUNTER, json=rpc("tools/list", {}, 9), headers=session.headers)
    assert gone.status_code == 404  # the SDK has forgotten the MCP session


async def test_the_seed_draws_the_task_as_a_native_create_does(gym: AppHarness) -> None:
    first = await open_session(gym.client, f"{COUNTER}?seed=7&split=validation")
    native = await gym.client.post("/v1/sessions", json={"env": "counter", "seed": 7, "split": "validation"})
    assert native.status_code == 201
    assert first.init["_meta"]["gym-server/episode"]["task_id"] == native.json()["task_id"]


async def test_at_capacity_a_new_mcp_session_is_refused_with_429_in_json_rpc_form(gym: AppHarness) -> None:
    await open_session(gym.client)
    await open_session(gym.client)
    refused = await gym.client.post(COUNTER, json=INITIALIZE, headers=HEADERS)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
    assert refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert refused.json()["id"] == 1 and error["data"]["status"] == 429
    assert "maximum of 2 live sessions" in error["message"]
    assert "mcp-session-id" not in refused.headers


@pytest.mark.parametrize(
    ("path", "status", "needle"),
    [
        ("/v1/environments/nope/mcp", 404, "no environment named 'nope'"),
        (f"{COUNTER}?task_id=counter-9999", 404, "no task 'counter-9999'"),
        (f"{COUNTER}?seed=minus-one", 422, "seed"),
        (f"{COUNTER}?ttl_s=5", 422, "accepted: task_id, seed, split, run"),
    ],
)
async def test_a_bad_opening_is_a_json_rpc_error_at_the_native_status(
    gym: AppHarness, path: str, status: int, needle: str
) -> None:
    response = await gym.client.post(path, json=INITIALIZE, headers=HEADERS)
    assert response.status_code == status, response.text
    assert needle in response.json()["error"]["message"]
    assert gym.app.state.manager.live_count == 0


BAD_INITIALIZES = [
    rpc("initialize"),  # no params: the SDK answers 200 with a JSON-RPC error
    rpc("initialize", {}),
    rpc("initialize", {"protocolVersion": VERSION, "capabilities": {}}),  # no clientInfo
    rpc("initialize", {**INITIALIZE["params"], "capabilities": "all"}),
    {**INITIALIZE, "id": None},  # a notification: the SDK refuses it (400)
    [INITIALIZE],  # a batch: refused (400)
]


async def test_a_failed_initialize_leaves_no_episode_and_no_mcp_session(gym: AppHarness) -> None:
    # Twice the SDK's own session limit (2 x max_sessions): a failed initialize that held an MCP session
    # (or a gym session) would leave the next opening refused.
    for body in BAD_INITIALIZES * 2:
        response = await gym.client.post(COUNTER, json=body, headers=HEADERS)
        assert "error" in response.json(), response.text
        assert "mcp-session-id" not in response.headers, body
        assert gym.app.state.manager.live_count == 0
    assert (await gym.client.get("/v1/rollouts")).json()["total"] == 0  # no episode was ever opened
    first, second = await open_session(gym.client), await open_session(gym.client)
    assert (await first.call("read"))["result"]["isError"] is False
    assert (await second.call("read"))["result"]["isError"] is False


async def test_an_opening_that_fails_after_its_episode_opened_closes_it(
    gym: AppHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> str:
        raise RuntimeError("instructions cannot be written")

    monkeypatch.setattr(mcp_mapping, "instructions", broken)
    response = await gym.client.post(COUNTER, json=INITIALIZE, headers=HEADERS)
    assert "error" in response.json() and "mcp-session-id" not in response.headers
    assert gym.app.state.manager.live_count == 0
    listed = (await gym.client.get("/v1/rollouts")).json()["items"]
    assert [item["status"] for item in listed] == ["abandoned"]  # opened, then closed and stored
    monkeypatch.undo()
    assert (await (await open_session(gym.client)).call("read"))["result"]["isError"] is False


async def test_a_call_that_ends_the_episode_without_a_reply_is_a_success(gym: AppHarness) -> None:
    # `tool_call` scores the call it is given without running it: no tool message, reward 1.0.
    session = await open_session(gym.client, "/v1/environments/tool_call/mcp?task_id=tool_call-00001")
    result = (await session.call("list_events", {"date": "2025-03-29"}))["result"]
    assert result["isError"] is False and result["content"] == []
    episode = result["_meta"]["gym-server/episode"]
    assert (episode["done"], episode["reward"]) == (True, 1.0)
    assert "failure" not in episode["info"]


async def test_only_an_initialize_opens_an_episode(gym: AppHarness) -> None:
    response = await gym.client.post(COUNTER, json=rpc("tools/list", {}), headers=HEADERS)
    assert 400 <= response.status_code < 500
    assert gym.app.state.manager.live_count == 0


async def test_the_stateless_protocol_era_is_refused_before_any_episode(gym: AppHarness) -> None:
    headers = {**HEADERS, "mcp-protocol-version": "2026-07-28"}
    response = await gym.client.post(COUNTER, json=rpc("server/discover", {}), headers=headers)
    assert response.status_code == 400
    assert "initialize handshake" in response.json()["error"]["message"]
    assert gym.app.state.manager.live_count == 0


async def test_a_session_is_bound_to_the_environment_that_opened_it(gym: AppHarness) -> None:
    session = await open_session(gym.client)
    other = await gym.client.post(
        "/v1/environments/workplace/mcp", json=rpc("tools/list", {}, 5), headers=session.headers
    )
    assert other.status_code == 404 and "episode of 'counter'" in other.json()["error"]["message"]


async def test_an_abandoned_mcp_session_is_stored_when_its_ttl_runs_out(tmp_path: Path) -> None:
    overrides = {"default_ttl_s": 0.3, "reap_interval_s": 0.05}
    async with serving(tmp_path, sessions=overrides) as gym:
        session = await open_session(gym.client)
        await session.call("read")
        stored = await wait_for_rollout(gym.client, session.gym_id, "expired")
        assert stored["num_turns"] == 1
        # The MCP session idles out on the same TTL: whichever clock fired first, no step is taken.
        late = await gym.client.post(
            COUNTER, json=rpc("tools/call", {"name": "read"}, 9), headers=session.headers
        )
        assert late.status_code in (200, 404) and late.json()["error"]["code"] == -32600, late.text
        assert (await gym.client.get(f"/v1/rollouts/{session.gym_id}")).json()["num_turns"] == 1


async def test_without_the_extra_no_mcp_route_is_mounted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(mcp_facade, "available", lambda: False)
    app = create_app(Settings(store={"url": f"sqlite:///{tmp_path / 'gym.db'}"}))
    assert all(getattr(route, "path", "") != mcp_facade.MCP_PATH for route in app.router.routes)


BLOCK_MCP = """\
import sys
from importlib.machinery import PathFinder


class WithoutMcp(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in ("mcp", "mcp_types"):
            return None
        return PathFinder.find_spec(fullname, path, target)


sys.meta_path[:] = [WithoutMcp if finder is PathFinder else finder for finder in sys.meta_path]
"""


def test_the_server_starts_without_the_extra_and_says_which_to_install(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_MCP)
    server = server_factory(
        f"sqlite:///{tmp_path / 'gym.db'}",
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        GYM_SANDBOX__BACKEND="unsafe-no-sandbox",
    )
    server.start()
    try:
        assert httpx.get(f"{server.url}/v1/environments/counter").status_code == 200
        refused = httpx.post(f"{server.url}{COUNTER}", json=INITIALIZE, headers=HEADERS)
        # No MCP route: the app's own problem for a path it does not serve this way, not JSON-RPC.
        assert refused.status_code in (404, 405)
        assert refused.headers["content-type"] == "application/problem+json"
    finally:
        output = server.stop()
    assert "MCP facade off (needs the mcp extra: pip install 'gym-server[mcp]')" in output


async def test_a_number_beyond_a_double_in_a_tool_call_is_refused_before_the_step(gym: AppHarness) -> None:
    # The MCP library reads 1e400 as infinity; stored it would read null. Refused like the native 422.
    session = await open_session(gym.client)
    before = (await gym.client.get(f"/v1/sessions/{session.gym_id}")).json()["messages"]
    raw = (
        '{"jsonrpc": "2.0", "id": 9, "method": "tools/call",'
        ' "params": {"name": "add", "arguments": {"amount": 1e400}}}'
    )
    response = await gym.client.post(COUNTER, content=raw, headers=session.headers)
    error = response.json()["error"]
    assert error["code"] == mcp_mapping.INVALID_PARAMS and "double" in error["message"], response.text
    after = (await gym.client.get(f"/v1/sessions/{session.gym_id}")).json()["messages"]
    assert after == before  # nothing reached the environment
    assert (await session.call("read"))["result"]["isError"] is False  # and the episode goes on
