"""With API keys on, an episode's gateway and MCP URLs take the key that opened it (scope `episodes`,
same tenant): no key is 401; another tenant's key finds no such episode (404), on every gateway route."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from authtest import KeyMaker, bearer
from conftest import free_port

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


async def test_the_episode_urls_answer_only_the_key_of_its_tenant(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    owner, stranger = keys.create(tenant(), "episodes", "read"), keys.create(tenant(), "admin")
    gateway = {"upstream": f"http://127.0.0.1:{free_port()}", "model": "m"}
    async with secured() as gym:
        body = {"env": "counter", "gateway": gateway}
        created = await gym.client.post("/v1/sessions", json=body, headers=bearer(owner))
        assert created.status_code == 201, created.text
        episode = created.json()
        base, mcp, session_id = (
            episode["gateway"]["base_url"],
            episode["gateway"]["mcp_url"],
            episode["session_id"],
        )
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

        assert (await gym.client.get(f"{base}/models")).status_code == 401
        assert (await gym.client.post(mcp, json=INITIALIZE, headers=HEADERS)).status_code == 401

        other = bearer(stranger)
        refused = await gym.client.post(f"{base}/chat/completions", json=chat, headers=other)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "session-not-found"
        assert (await gym.client.get(f"{base}/models", headers=other)).status_code == 404
        assert (await gym.client.post(mcp, json=INITIALIZE, headers={**HEADERS, **other})).status_code == 404
        assert (await gym.client.post(f"/v1/sessions/{session_id}/answer", headers=other)).status_code == 404

        mine = bearer(owner)
        assert (await gym.client.get(f"{base}/models", headers=mine)).json()["data"][0]["id"] == "m"
        assert (await gym.client.post(mcp, json=INITIALIZE, headers={**HEADERS, **mine})).status_code == 200
        assert (await gym.client.post(f"/v1/sessions/{session_id}/answer", headers=mine)).status_code == 200
        assert (await gym.client.get(f"/v1/rollouts/{session_id}/samples", headers=other)).status_code == 404
        samples = await gym.client.get(f"/v1/rollouts/{session_id}/samples", headers=mine)
        assert samples.status_code == 200 and samples.json()["num_calls"] == 0
