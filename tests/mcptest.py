"""The MCP wire in raw JSON-RPC over streamable HTTP (JSON responses), for the in-process tests of the
MCP facade: a request body, the headers, and one open MCP session."""

from __future__ import annotations

from typing import Any

import httpx

COUNTER = "/v1/environments/counter/mcp"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
VERSION = "2025-11-25"


def rpc(method: str, params: dict[str, Any] | None = None, request_id: int | None = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        body["params"] = params
    if request_id is not None:
        body["id"] = request_id
    return body


INITIALIZE = rpc(
    "initialize",
    {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
)


class McpSession:
    """One MCP session over the in-process client."""

    def __init__(self, client: httpx.AsyncClient, path: str, init: httpx.Response) -> None:
        self.client, self.path = client, path
        self.mcp_id = init.headers["mcp-session-id"]
        self.init = init.json()["result"]
        self.gym_id: str = self.init["_meta"]["gym-server/episode"]["session_id"]
        self._next = 2

    @property
    def headers(self) -> dict[str, str]:
        return {**HEADERS, "mcp-session-id": self.mcp_id, "mcp-protocol-version": VERSION}

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next += 1
        response = await self.client.post(
            self.path, json=rpc(method, params, self._next), headers=self.headers
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.request("tools/call", {"name": name, "arguments": arguments or {}})


async def open_session(client: httpx.AsyncClient, path: str = COUNTER) -> McpSession:
    init = await client.post(path, json=INITIALIZE, headers=HEADERS)
    assert init.status_code == 200, init.text
    session = McpSession(client, path, init)
    notified = await client.post(
        path, json=rpc("notifications/initialized", request_id=None), headers=session.headers
    )
    assert notified.status_code == 202, notified.text
    return session
