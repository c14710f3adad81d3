"""The real `mcp` client (2.3.0) on a gym that requires keys: the key goes in an `httpx2.AsyncClient`'s
headers handed to `streamable_http_client(url, http_client=...)`, the SDK's documented way to set
headers; every request of the session (initialize, calls, the closing DELETE) carries it."""

from __future__ import annotations

import httpx2
import pytest
from conftest import KeyedGym, bearer
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

pytestmark = pytest.mark.anyio

EPISODE = "gym-server/episode"


async def test_with_an_episodes_key_the_episode_plays_and_is_stored_under_its_tenant(
    keyed_gym: KeyedGym,
) -> None:
    gym = keyed_gym.gym
    url = gym.mcp_url("counter", task_id="counter-0000", seed=0, run="interop-mcp-keys")
    async with (
        httpx2.AsyncClient(headers=bearer(keyed_gym.episodes)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        assert init.meta is not None
        session_id = str(init.meta[EPISODE]["session_id"])
        done = await session.call_tool("submit", {})
        assert done.meta is not None and done.meta[EPISODE]["done"] is True
    stored = gym.stored(session_id, "completed")  # the DELETE carried the key too: closed and stored
    assert stored["run"] == "interop-mcp-keys" and stored["reward"] == done.meta[EPISODE]["reward"]
    # acme's trajectory: another tenant's reader is answered as for an id never used
    assert gym.get(f"/v1/rollouts/{session_id}", key=keyed_gym.rival)[0] == 404


@pytest.mark.parametrize("headers", [{}, "wrong"], ids=["no key", "wrong key"])
async def test_without_a_valid_key_initialize_fails_and_opens_no_episode(
    keyed_gym: KeyedGym, headers: dict[str, str] | str
) -> None:
    gym = keyed_gym.gym
    sent = bearer(keyed_gym.wrong) if headers == "wrong" else {}
    url = gym.mcp_url("counter", run="interop-mcp-refused")
    # mcp 2.3 answers an error status without a JSON-RPC body with this error (the status itself is not
    # surfaced), raised out of the session's task group
    refused = pytest.RaisesExc(MCPError, check=lambda exc: exc.code == INTERNAL_ERROR)
    with pytest.RaisesGroup(refused, flatten_subgroups=True):
        async with (
            httpx2.AsyncClient(headers=sent) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
    assert gym.get("/v1/rollouts?run=interop-mcp-refused")[1]["items"] == []
