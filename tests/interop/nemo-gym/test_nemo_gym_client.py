"""NeMo Gym's own client code (nemo-gym 0.4.0) against real `gym-server serve` processes.

- NeMo Gym's `SimpleAgent` (`/run`: seed_session, the model loop with one POST per tool call, verify),
  with a scripted Responses-API policy, plays a counter episode on the gym's environment: the reward it
  reports is the stored trajectory's, and the gym's errors reached the model as tool outputs.
- NeMo Gym's `ServerClient` (its aiohttp `request`, `raise_for_status`, `get_response_json`) and its
  pydantic models (`BaseVerifyRequest`, `BaseVerifyResponse`, `NeMoGymResponse`) speak to the routes
  directly: the verify answer is a valid `BaseVerifyResponse`, refusals are `{"detail": ...}` at their
  status (429 at capacity), an episode left alone is reaped by the gym's TTL and stored.
- On a gym that requires keys: the `SimpleAgent` plays with the key its `ServerClient` adds as a header
  (nemo-gym 0.4.0 has no setting for one), stored under the key's tenant; no key or a wrong one is
  NeMo Gym's `ClientResponseError` 401 carrying the gym's detail.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import nemo_gym.server_utils as server_utils
import pytest
from aiohttp import ClientResponse, ClientResponseError
from conftest import Gym, KeyedGym, NemoServers
from nemo_gym.base_resources_server import BaseVerifyRequest, BaseVerifyResponse
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.server_utils import (
    GlobalAIOHTTPAsyncClientConfig,
    get_response_json,
    raise_for_status,
    set_global_aiohttp_client,
)
from nemo_servers import AGENT, RESOURCES, global_config, server_client

pytestmark = pytest.mark.anyio

COOKIE = "gym_server_nemo_gym"
PARAMS = {
    "input": [{"role": "user", "content": "Bring the counter to 26, then submit."}],
    "tools": [
        {"type": "function", "name": name, "parameters": parameters, "strict": False}
        for name, parameters in (
            ("read", {"type": "object", "properties": {}}),
            ("add", {"type": "object", "properties": {"amount": {"type": "integer"}}}),
            ("submit", {"type": "object", "properties": {}}),
        )
    ],
}
ROW = {"responses_create_params": PARAMS, "task_id": "counter-0000", "seed": 0}


@pytest.fixture
async def nemo_http() -> AsyncIterator[None]:
    """NeMo Gym's global aiohttp client, made in this test's event loop as its servers make it in theirs."""
    session = set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())
    yield
    await session.close()
    server_utils._GLOBAL_AIOHTTP_CLIENT = None  # its own exit hook runs a loop of its own, at exit


class Resources:
    """The gym's environment through NeMo Gym's `ServerClient`, cookies carried as its agent carries them."""

    def __init__(self, gym: Gym, env: str = "counter", api_key: str | None = None) -> None:
        self.client = server_client(global_config(gym.url, env, 1, 1), api_key)
        self.cookies: Any = None

    async def post(self, route: str, body: Any) -> ClientResponse:
        response = await self.client.post(RESOURCES, f"/{route}", json=body, cookies=self.cookies)
        self.cookies = response.cookies
        return response

    async def json(self, route: str, body: Any) -> tuple[int, Any]:
        response = await self.post(route, body)
        return response.status, await get_response_json(response)


async def test_nemo_gyms_simple_agent_plays_a_counter_episode_on_the_gym(
    gym: Gym, nemo_servers: NemoServers, nemo_http: None
) -> None:
    client = server_client(
        global_config(gym.url, "counter", nemo_servers.agent_port, nemo_servers.policy_port)
    )
    response = await client.post(AGENT, "/run", json=ROW)
    await raise_for_status(response)
    result = await get_response_json(response)

    assert result["reward"] == 1.0 and result["reward_components"] == {"reached": 1.0, "submitted": 1.0}
    stored = gym.stored(result["gym_session_id"], "completed")
    assert stored["reward"] == result["reward"] and stored["metadata"] == {"protocol": "nemo-gym"}
    assert (stored["env"], stored["task_id"], stored["seed"]) == ("counter", "counter-0000", 0)

    # What the agent fed its model: the gym's errors in NeMo Gym's form, then the episode went on.
    outputs = [
        item["output"] for item in result["response"]["output"] if item["type"] == "function_call_output"
    ]
    assert outputs[0] == '{"detail":"unknown tool \'subtract\'; this episode\'s tools: read, add, submit"}'
    assert outputs[1].startswith('{"detail":"Error: invalid arguments for \'add\'')
    assert outputs[2:] == ["20", "26", '"submitted 26"']
    final = result["response"]["output"][-1]
    assert final["type"] == "message" and "submitted" in final["content"][0]["text"]

    # The stored transcript: every call that reached the environment (the unknown tool did not).
    calls = [m["tool_calls"][0]["function"]["name"] for m in stored["messages"] if m["role"] == "assistant"]
    assert calls == ["add", "read", "add", "submit"] and stored["num_turns"] == 4


async def test_verify_answers_a_valid_base_verify_response_with_the_stored_reward(
    gym: Gym, nemo_http: None
) -> None:
    resources = Resources(gym)
    status, opening = await resources.json("seed_session", ROW)
    assert status == 200 and opening["task_id"] == "counter-0000"
    assert (await resources.json("add", {"amount": 2}))[1] == 22  # short of the target 26

    params = NeMoGymResponseCreateParamsNonStreaming.model_validate(PARAMS)
    response = NeMoGymResponse(
        id="resp_1",
        created_at=time.time(),
        model="scripted",
        object="response",
        output=[],
        parallel_tool_calls=False,
        tool_choice="auto",
        tools=[],
    )
    request = BaseVerifyRequest(responses_create_params=params, response=response)
    answer = await resources.post("verify", request.model_dump(mode="json"))
    await raise_for_status(answer)
    verified = BaseVerifyResponse.model_validate(await get_response_json(answer))
    assert verified.reward == 0.0 and verified.response.id == "resp_1"
    stored = gym.stored(opening["session_id"], "abandoned")  # scored before it was submitted
    assert stored["reward"] == verified.reward and stored["verify_info"]["value"] == 22


async def test_errors_come_in_nemo_gyms_form_through_its_client(gym: Gym, nemo_http: None) -> None:
    resources = Resources(gym)
    await resources.json("seed_session", ROW)
    unknown = await resources.post("nope", {})
    with pytest.raises(ClientResponseError) as raised:
        await raise_for_status(unknown)
    assert raised.value.status == 404
    assert (
        raised.value.response_content
        == b'{"detail":"unknown tool \'nope\'; this episode\'s tools: read, add, submit"}'
    )
    status, body = await resources.json("add", {"amount": 99})
    assert status == 422 and body == {"detail": "Error: amount must be between -10 and 10, got 99"}
    assert COOKIE in resources.cookies  # set again on the errors: the episode goes on
    assert await resources.json("read", {}) == (200, 20)

    stranger = Resources(gym)
    status, body = await stranger.json("read", {})
    assert status == 400 and "seed_session first" in body["detail"]


async def test_at_capacity_seed_session_is_refused_with_429(gym_with: Any, nemo_http: None) -> None:
    gym = gym_with(GYM_SESSIONS__MAX_SESSIONS="1")
    first = Resources(gym)
    assert (await first.json("seed_session", ROW))[0] == 200
    refused = await Resources(gym).post("seed_session", ROW)
    assert refused.status == 429 and refused.headers["Retry-After"] == "2"
    assert "maximum of 1 live sessions" in (await get_response_json(refused))["detail"]
    assert COOKIE not in refused.cookies
    assert await first.json("read", {}) == (200, 20)  # the open episode is untouched


async def test_an_episode_left_alone_is_reaped_by_the_ttl_and_stored(gym_with: Any, nemo_http: None) -> None:
    gym = gym_with(GYM_SESSIONS__DEFAULT_TTL_S="0.5", GYM_SESSIONS__REAP_INTERVAL_S="0.05")
    resources = Resources(gym)
    status, opening = await resources.json("seed_session", ROW)
    assert status == 200
    await resources.json("read", {})
    stored = gym.stored(opening["session_id"], "expired")
    assert stored["num_turns"] == 1 and stored["failure"] == "expired"
    status, body = await resources.json("read", {})
    assert status == 410 and "expired" in body["detail"]


async def test_with_the_key_in_its_server_client_the_simple_agent_plays_under_the_keys_tenant(
    keyed_gym: KeyedGym, keyed_nemo_servers: NemoServers, nemo_http: None
) -> None:
    gym = keyed_gym.gym
    config = global_config(gym.url, "counter", keyed_nemo_servers.agent_port, keyed_nemo_servers.policy_port)
    response = await server_client(config).post(AGENT, "/run", json=ROW)  # the agent is no gym: no key
    await raise_for_status(response)
    result = await get_response_json(response)
    assert result["reward"] == 1.0
    stored = gym.stored(result["gym_session_id"], "completed")  # acme's read key finds it ...
    assert stored["reward"] == 1.0 and stored["metadata"] == {"protocol": "nemo-gym"}
    assert (
        gym.get(f"/v1/rollouts/{result['gym_session_id']}", key=keyed_gym.rival)[0] == 404
    )  # ... not rival's


@pytest.mark.parametrize("key", ["none", "wrong"])
async def test_without_a_valid_key_seed_session_is_a_401_with_the_gyms_detail(
    keyed_gym: KeyedGym, nemo_http: None, key: str
) -> None:
    resources = Resources(keyed_gym.gym, api_key=keyed_gym.wrong if key == "wrong" else None)
    refused = await resources.post("seed_session", {**ROW, "run": "interop-nemo-refused"})
    with pytest.raises(ClientResponseError) as raised:
        await raise_for_status(refused)
    assert raised.value.status == 401 and refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert b"a valid API key is required" in raised.value.response_content
    assert keyed_gym.gym.get("/v1/rollouts?run=interop-nemo-refused")[1]["items"] == []
