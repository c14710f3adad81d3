"""openenv-core 0.3.0's clients on a gym that requires keys.

`EnvClient` (under `GenericEnvClient` and `MCPToolClient`) opens its WebSocket with websockets'
`connect(url, open_timeout=..., max_size=...)` and nothing else: no headers, no auth, no hook (0.3.0
has no `headers` or `Authorization` anywhere). So the unchanged clients are refused at the handshake,
and a key reaches the gym only through a workaround: a subclass whose `connect` passes websockets'
`additional_headers` (below; it sets 0.3.0's private `_ws`, `_ws_url`, `_connect_timeout` and
`_max_message_size`, so it is tied to that version), or a reverse proxy that adds the header.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import KeyedGym, bearer
from openenv.core import GenericEnvClient, MCPToolClient
from openenv.core.env_client import EnvClient
from websockets.asyncio.client import connect as ws_connect

EPISODE = "gym-server/episode"


class BearerConnect(EnvClient[Any, Any, Any]):
    """openenv-core 0.3.0's `connect`, with the gym key as `Authorization: Bearer` on the handshake."""

    def __init__(self, base_url: str, api_key: str, **options: Any) -> None:
        super().__init__(base_url, **options)
        self._api_key = api_key

    async def connect(self) -> EnvClient[Any, Any, Any]:
        if self._ws is None:
            try:
                self._ws = await ws_connect(
                    self._ws_url,
                    open_timeout=self._connect_timeout,
                    max_size=self._max_message_size,
                    additional_headers=bearer(self._api_key),
                )
            except Exception as exc:  # as EnvClient.connect reports a failed connect
                raise ConnectionError(f"Failed to connect to {self._ws_url}: {exc}") from exc
        return self


class KeyedGenericEnvClient(BearerConnect, GenericEnvClient):
    pass


class KeyedMCPToolClient(BearerConnect, MCPToolClient):
    pass


def test_a_subclass_sending_the_key_plays_and_the_episode_is_stored_under_its_tenant(
    keyed_gym: KeyedGym,
) -> None:
    gym = keyed_gym.gym
    url = gym.env_url("counter", "openenv")
    with KeyedGenericEnvClient(url, keyed_gym.episodes).sync() as env:
        opened = env.reset(task_id="counter-0000", seed=0, run="interop-openenv-keys")
        session_id = opened.observation["metadata"][EPISODE]["session_id"]
        final = env.step({"type": "call_tool", "tool_name": "submit", "arguments": {}})
        assert final.done is True
    stored = gym.stored(session_id, "completed")  # acme's read key finds it ...
    assert stored["run"] == "interop-openenv-keys" and stored["metadata"]["transport"] == "ws"
    assert gym.get(f"/v1/rollouts/{session_id}", key=keyed_gym.rival)[0] == 404  # ... another tenant's not

    with KeyedMCPToolClient(url, keyed_gym.episodes).sync() as tools:
        opened = tools.reset(task_id="counter-0001", seed=2, run="interop-openenv-keys")
        assert tools.call_tool("read").lstrip("-").isdigit()
    gym.stored(opened.observation.metadata[EPISODE]["session_id"], "abandoned")


@pytest.mark.parametrize("client", [GenericEnvClient, MCPToolClient])
def test_the_unchanged_clients_are_refused_at_the_handshake(keyed_gym: KeyedGym, client: type[Any]) -> None:
    gym = keyed_gym.gym
    env = client(base_url=gym.env_url("counter", "openenv")).sync()
    with pytest.raises(ConnectionError, match=r"Failed to connect to ws://.*/openenv/ws: .*HTTP 403"):
        env.connect()


def test_a_wrong_key_is_refused_at_the_handshake(keyed_gym: KeyedGym) -> None:
    gym = keyed_gym.gym
    env = KeyedGenericEnvClient(gym.env_url("counter", "openenv"), keyed_gym.wrong).sync()
    with pytest.raises(ConnectionError, match=r"HTTP 403"):
        env.connect()
