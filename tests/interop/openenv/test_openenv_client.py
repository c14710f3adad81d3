"""openenv-core 0.3.0's own clients play gym episodes against a real `gym-server serve`.

The clients are openenv-core's, unchanged: `GenericEnvClient` (plain dict actions) and `MCPToolClient`
(`list_tools` / `call_tool`, OpenEnv's MCP actions), both over its WebSocket session, given the gym's
`/v1/environments/{env}/openenv` as their `base_url`. openenv-core 0.3.0 ships no client for the HTTP
`/reset` and `/step` routes, so the HTTP test sends openenv-core's own request models
(`ResetRequest`, `StepRequest`) and validates every answer with its response models.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import pytest
import requests
from conftest import Gym
from openenv.core import GenericEnvClient, MCPToolClient
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation, ListToolsObservation
from openenv.core.env_server.types import ResetRequest, ResetResponse, State, StepRequest, StepResponse

EPISODE = "gym-server/episode"


def target_of(messages: list[dict[str, Any]]) -> int:
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    return int(prompt.split("to ")[1].split(",")[0])


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


def calls_of(record: dict[str, Any]) -> list[str]:
    return [m["tool_calls"][0]["function"]["name"] for m in record["messages"] if m.get("tool_calls")]


def test_generic_client_plays_a_counter_episode_over_the_websocket(gym: Gym) -> None:
    with GenericEnvClient(base_url=gym.env_url("counter", "openenv")).sync() as env:
        opened = env.reset(task_id="counter-0000", seed=0, episode_id="oe-1", run="interop-openenv")
        assert (opened.done, opened.reward) == (False, None)
        session_id = opened.observation["metadata"][EPISODE]["session_id"]
        value = int(env.step(call("read")).observation["result"]["data"])
        target = target_of(opened.observation["messages"])
        while value != target:
            result = env.step(call("add", amount=max(-10, min(10, target - value))))
            value = int(result.observation["result"]["data"])
        final = env.step(call("submit"))
        assert (final.done, final.reward) == (True, 1.0)
        state = env.state()
        assert state["episode_id"] == session_id
        assert state["done"] is True
    stored = gym.stored(session_id, "completed")  # the client's close message closed and stored it
    assert stored["reward"] == final.reward
    assert stored["run"] == "interop-openenv"
    assert stored["metadata"] == {"protocol": "openenv", "transport": "ws", "episode_id": "oe-1"}
    assert calls_of(stored)[0] == "read" and calls_of(stored)[-1] == "submit"
    assert stored["num_turns"] == state["step_count"]


def test_mcp_tool_client_lists_and_calls_the_gym_tools(gym: Gym) -> None:
    _, catalog = gym.get("/v1/environments/counter")
    with MCPToolClient(base_url=gym.env_url("counter", "openenv")).sync() as env:
        opened = env.reset(task_id="counter-0001", seed=2)
        assert isinstance(opened.observation, ListToolsObservation)  # a reset answers the tools too
        session_id = opened.observation.metadata[EPISODE]["session_id"]
        tools = env.list_tools()
        assert [tool.name for tool in tools] == [t["function"]["name"] for t in catalog["tools"]]
        assert tools[1].input_schema["properties"]["amount"]["type"] == "integer"
        with pytest.raises(RuntimeError, match=r"invalid_args"):  # a bad call: the tool's error, a step
            env.call_tool("add", amount="lots")
        value = int(env.call_tool("read"))
        target = -16  # counter-0001's target
        while value != target:
            value = int(env.call_tool("add", amount=max(-10, min(10, target - value))))
        final = env.step(CallToolAction(tool_name="submit"))
        assert isinstance(final.observation, CallToolObservation)
        assert final.observation.result["data"] == "submitted -16"
        assert (final.done, final.reward) == (True, 1.0)
    stored = gym.stored(session_id, "completed")
    assert stored["reward"] == 1.0
    assert calls_of(stored)[0] == "add"  # the failed call is stored as a step, as natively


def test_a_malformed_action_is_answered_in_openenv_error_form_and_the_episode_goes_on(gym: Gym) -> None:
    with GenericEnvClient(base_url=gym.env_url("counter", "openenv")).sync() as env:
        opened = env.reset(task_id="counter-0002", seed=0)
        session_id = opened.observation["metadata"][EPISODE]["session_id"]
        with pytest.raises(RuntimeError, match=r"invalid action.*\(code: VALIDATION_ERROR\)"):
            env.step({"type": "call_tool", "arguments": {}})  # no tool_name
        with pytest.raises(RuntimeError, match=r"\(code: VALIDATION_ERROR\)"):
            env.step({"code": "print(1)"})  # another environment's action
        assert env.state()["step_count"] == 0  # neither reached the environment
        read = env.step(call("read"))
        assert read.observation["result"]["data"].isdigit()
        assert env.state()["step_count"] == 1
    assert gym.stored(session_id, "abandoned")["num_turns"] == 1


CLIENT = """
import sys
from openenv.core import GenericEnvClient
env = GenericEnvClient(base_url=sys.argv[1]).sync()
env.connect()
opened = env.reset(task_id="counter-0003", seed=0)
env.step({"type": "call_tool", "tool_name": "read", "arguments": {}})
print(opened.observation["metadata"]["gym-server/episode"]["session_id"], flush=True)
import time; time.sleep(60)
"""


def test_a_client_killed_mid_episode_leaves_a_stored_trajectory(gym: Gym) -> None:
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, gym.env_url("counter", "openenv")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout is not None
        session_id = client.stdout.readline().strip()
        assert gym.get(f"/v1/sessions/{session_id}")[0] == 200
    finally:
        client.send_signal(signal.SIGKILL)  # no close message: the TCP connection just drops
        client.wait()
    stored = gym.stored(session_id, "abandoned")  # closed at the disconnect, not at the TTL
    assert stored["num_turns"] == 1
    assert stored["metadata"]["protocol"] == "openenv"


def test_at_capacity_a_reset_is_refused_with_capacity_reached(gym_with: Any) -> None:
    gym: Gym = gym_with(GYM_SESSIONS__MAX_SESSIONS="1", GYM_SESSIONS__RETRY_AFTER_S="3")
    url = gym.env_url("counter", "openenv")
    with GenericEnvClient(base_url=url).sync() as first, GenericEnvClient(base_url=url).sync() as second:
        first.reset(task_id="counter-0000", seed=0)
        with pytest.raises(RuntimeError, match=r"maximum of 1 live sessions.*\(code: CAPACITY_REACHED\)"):
            second.reset(task_id="counter-0000", seed=0)
        assert first.step(call("read")).observation["result"]["data"].isdigit()  # the first is untouched
        http = requests.post(
            f"{url}/reset", json=ResetRequest(seed=1).model_dump(exclude_unset=True), timeout=10
        )
        assert http.status_code == 429
        assert http.headers["retry-after"] == "3"
    # Both connections closed: the slot is free again.
    with GenericEnvClient(base_url=url).sync() as third:
        assert third.reset(task_id="counter-0000", seed=0).done is False


def test_http_routes_speak_openenv_request_and_response_models(gym: Gym) -> None:
    base = gym.env_url("counter", "openenv")
    reset = requests.post(
        f"{base}/reset", json=ResetRequest(seed=4).model_dump(exclude_unset=True), timeout=10
    )
    assert reset.status_code == 200, reset.text
    opened = ResetResponse.model_validate(reset.json())
    session_id = opened.observation["metadata"][EPISODE]["session_id"]
    target = target_of(opened.observation["messages"])

    def step(action: dict[str, Any]) -> StepResponse:
        request = StepRequest(action=action, episode_id=session_id)  # OpenEnv's StepRequest allows extras
        response = requests.post(f"{base}/step", json=request.model_dump(exclude_none=True), timeout=10)
        assert response.status_code == 200, response.text
        return StepResponse.model_validate(response.json())

    malformed = requests.post(
        f"{base}/step",
        json=StepRequest(action={"type": "nope"}, episode_id=session_id).model_dump(),
        timeout=10,
    )
    assert malformed.status_code == 422
    assert "action" in malformed.json()["detail"]
    value = int(CallToolObservation.model_validate(step(call("read")).observation).result["data"])
    while value != target:
        observation = step(call("add", amount=max(-10, min(10, target - value)))).observation
        value = int(CallToolObservation.model_validate(observation).result["data"])
    state = State.model_validate(
        requests.get(f"{base}/state", params={"episode_id": session_id}, timeout=10).json()
    )
    assert state.episode_id == session_id
    final = step(call("submit"))
    assert (final.done, final.reward) == (True, 1.0)
    stored = gym.stored(session_id, "completed")  # the final step closed and stored it
    assert stored["reward"] == final.reward
    assert stored["metadata"] == {"protocol": "openenv", "transport": "http"}
    assert stored["num_turns"] == state.step_count + 1
