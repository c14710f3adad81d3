"""Every environment of the catalog is reachable on every route that names one: the catalog, its tasks,
and the MCP, OpenEnv and NeMo Gym facades (issue 37 item 11).

A family member's name holds a slash (`reasoning_gym/chain_sum`, `mcp_tools/time`, `nemo_gym/...`,
`openenv/...`), and MCP's route took `{env}` without one: a POST there was a 405 for every such
environment (9 of 99 reachable), and its GET event stream was taken by the catalog's describe route for
all. Each check below makes one request per environment that the route's own endpoint answers without
opening an episode, and asserts the answer names that environment or comes from that endpoint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from conftest import AppHarness, serving
from mcptest import HEADERS, VERSION, open_session, rpc

UNKNOWN_MCP = {**HEADERS, "mcp-session-id": "never-issued", "mcp-protocol-version": VERSION}


@pytest.fixture
async def gym(tmp_path: Path) -> AsyncIterator[AppHarness]:
    async with serving(tmp_path) as harness:
        yield harness


def names(gym: AppHarness) -> list[str]:
    every = list(gym.app.state.registry.names())
    assert any("/" in name for name in every)  # the family members the defect hid
    return every


async def test_the_catalog_and_tasks_answer_for_every_environment(gym: AppHarness) -> None:
    for name in names(gym):
        described = await gym.client.get(f"/v1/environments/{name}")
        assert described.status_code == 200 and described.json()["name"] == name, (name, described.text)
        tasks = await gym.client.get(f"/v1/environments/{name}/tasks", params={"limit": 1})
        assert tasks.status_code == 200 and tasks.json()["env"] == name, (name, tasks.text)


async def test_the_mcp_route_answers_for_every_environment(gym: AppHarness) -> None:
    """The MCP endpoint (not the router's 405, not the catalog's 404) answers each method on each name."""
    for name in names(gym):
        for path in (f"/v1/environments/{name}/mcp", f"/v1/environments/{quote(name, safe='')}/mcp"):
            for method in ("POST", "GET", "DELETE"):
                body = rpc("ping") if method == "POST" else None
                answer = await gym.client.request(method, path, json=body, headers=UNKNOWN_MCP)
                assert answer.status_code == 404, (name, method, answer.text)
                assert answer.json()["error"]["message"] == "Session not found", (name, method, answer.text)


async def test_the_openenv_and_nemo_gym_routes_answer_for_every_environment(gym: AppHarness) -> None:
    for name in names(gym):
        state = await gym.client.get(f"/v1/environments/{name}/openenv/state")
        assert state.status_code == 200 and state.json()["env"] == name, (name, state.text)
        verify = await gym.client.post(f"/v1/environments/{name}/nemo-gym/verify", json={})
        assert verify.status_code == 400, (name, verify.text)  # no episode cookie, from the facade itself
        assert f"/v1/environments/{name}/nemo-gym/seed_session" in verify.text, (name, verify.text)


@pytest.mark.parametrize("name", ["reasoning_gym/chain_sum", "reasoning_gym%2Fchain_sum"])
async def test_an_mcp_episode_of_a_family_member_plays(gym: AppHarness, name: str) -> None:
    client: httpx.AsyncClient = gym.client
    session = await open_session(client, f"/v1/environments/{name}/mcp")
    assert session.init["_meta"]["gym-server/episode"]["env"] == "reasoning_gym/chain_sum"
    listed = await session.request("tools/list")
    assert "result" in listed, listed
    closed = await client.delete(session.path, headers=session.headers)
    assert closed.status_code == 200, closed.text
