"""A NeMo Gym resources server inside the gym: nemo-gym 0.4.0's own `example_session_state_mgmt` server runs
as its own process from this peer's venv, registered with the gym by a manifest (`nemo_gym/session_state`),
and is played through the gym's native API; its tools are the episode's tools, its `/verify` reward is
the gym's reward, and the episode is stored.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from conftest import Gym, NemoResources

ENV = "nemo_gym/session_state"


def post(gym: Gym, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{gym.url}{path}", data=data, method="POST")
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def delete(gym: Gym, path: str) -> int:
    with urllib.request.urlopen(
        urllib.request.Request(f"{gym.url}{path}", method="DELETE"), timeout=30
    ) as response:
        return int(response.status)


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "c") -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "role": "assistant",
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}],
    }


def step(gym: Gym, session_id: str, message: dict[str, Any]) -> dict[str, Any]:
    status, body = post(gym, f"/v1/sessions/{session_id}/step", {"message": message})
    assert status == 200, body
    return dict(body)


def test_a_nemo_gym_resources_server_is_a_gym_environment(
    gym_with: Any, nemo_resources: NemoResources
) -> None:
    gym = gym_with(GYM_NEMO_GYM_MANIFESTS=str(nemo_resources.manifest))
    status, catalog = gym.get(f"/v1/environments/{ENV}")
    assert status == 200 and catalog["datasets"][0]["splits"] == {"example": 5}

    status, session = post(gym, "/v1/sessions", {"env": ENV, "task_id": "example-0000"})
    assert status == 201, session
    sid = session["session_id"]
    assert session["messages"] == [{"role": "user", "content": "add 1 then add 2 then get the count"}]
    assert [tool["function"]["name"] for tool in session["tools"]] == [
        "increment_counter",
        "get_counter_value",
    ]
    assert session["tools"][0]["function"]["parameters"]["required"] == ["count"]

    assert (
        step(gym, sid, call("increment_counter", {"count": 1}))["messages"][0]["content"]
        == '{"success":true}'
    )
    # Bad arguments reach the server, whose FastAPI 422 the model reads; an unknown tool never leaves the gym.
    bad = step(gym, sid, call("increment_counter", {"count": "x"}))["messages"][0]["content"]
    assert bad.startswith('Error: HTTP 422: {"detail":[{"type":"int_parsing"')
    unknown = step(gym, sid, call("decrement_counter", {}))["messages"][0]["content"]
    assert (
        unknown
        == "Error: unknown tool 'decrement_counter'; available tools: increment_counter, get_counter_value."
    )
    step(gym, sid, call("increment_counter", {"count": 2}))
    # The server's session (its cookie, carried by the gym) holds initial_count 3 + 1 + 2.
    assert step(gym, sid, call("get_counter_value", {}))["messages"][0]["content"] == '{"count":6}'
    done = step(gym, sid, {"role": "assistant", "content": "The count is 6."})
    assert done["done"] is True and done["reward"] == 1.0

    status, verified = post(gym, f"/v1/sessions/{sid}/verify")
    assert status == 200 and verified["reward"] == 1.0 and verified["failure"] is None
    assert delete(gym, f"/v1/sessions/{sid}") == 204
    stored = gym.stored(sid, "completed")
    assert (stored["reward"], stored["env"], stored["task_id"], stored["num_turns"]) == (
        1.0,
        ENV,
        "example-0000",
        6,
    )
    assert stored["env_version"] == catalog["version"]


def test_each_episode_has_its_own_server_session_and_the_servers_reward(
    gym_with: Any, nemo_resources: NemoResources
) -> None:
    gym = gym_with(GYM_NEMO_GYM_MANIFESTS=str(nemo_resources.manifest))
    first = post(gym, "/v1/sessions", {"env": ENV, "task_id": "example-0000"})[1]["session_id"]  # starts at 3
    second = post(gym, "/v1/sessions", {"env": ENV, "task_id": "example-0001"})[1][
        "session_id"
    ]  # starts at 6
    step(gym, first, call("increment_counter", {"count": 1}))
    step(gym, second, call("increment_counter", {"count": 9}))
    assert step(gym, first, call("get_counter_value", {}))["messages"][0]["content"] == '{"count":4}'
    assert step(gym, second, call("get_counter_value", {}))["messages"][0]["content"] == '{"count":15}'
    assert post(gym, f"/v1/sessions/{first}/verify")[1]["reward"] == 0.0  # expected 6
    assert post(gym, f"/v1/sessions/{second}/verify")[1]["reward"] == 1.0  # expected 15
    for sid in (first, second):
        delete(gym, f"/v1/sessions/{sid}")
    assert gym.stored(first, "abandoned")["reward"] == 0.0
    assert gym.stored(second, "abandoned")["reward"] == 1.0


def test_a_server_that_is_down_refuses_the_session_with_503(
    gym_with: Any, nemo_resources: NemoResources
) -> None:
    gym = gym_with(GYM_NEMO_GYM_MANIFESTS=str(nemo_resources.manifest))
    nemo_resources.process.terminate()
    nemo_resources.process.wait(timeout=20)
    status, problem = post(gym, "/v1/sessions", {"env": ENV, "task_id": "example-0000"})
    assert status == 503 and "did not seed the episode" in problem["detail"], problem
    assert gym.get("/readyz")[1]["live_sessions"] == 0
