"""The OpenEnv facade in process: its WebSocket session and HTTP routes spoken to in OpenEnv's raw wire
format, against the app with its lifespan (Starlette's TestClient, which speaks WebSocket).

openenv-core's own clients drive a real server in tests/interop/openenv (`make interop PEER=openenv`);
these check the gym's side: episodes opened, stepped, refused, limited and stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import make_settings
from gymtest import STORE_WAIT_S, target_of
from starlette.testclient import TestClient, WebSocketTestSession

from gym_server.app import create_app

WS = "ws://localhost/v1/environments/counter/openenv/ws"
HTTP = "/v1/environments/counter/openenv"
EPISODE = "gym-server/episode"


@contextmanager
def gym(tmp_path: Path, **overrides: Any) -> Iterator[TestClient]:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'gym.db'}", **overrides))
    with TestClient(app, base_url="http://localhost") as client:
        yield client


def stored(client: TestClient, session_id: str, status: str) -> dict[str, Any]:
    """The stored trajectory once it has `status` (the writer batches: poll to a deadline)."""
    deadline = time.monotonic() + STORE_WAIT_S
    while True:
        response = client.get(f"/v1/rollouts/{session_id}")
        if response.status_code == 200 and response.json()["status"] == status:
            return dict(response.json())
        assert time.monotonic() < deadline, f"{session_id} not {status}: {response.text}"
        time.sleep(0.02)


def send(ws: WebSocketTestSession, kind: str, data: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"type": kind}
    if data is not None:
        message["data"] = data
    ws.send_text(json.dumps(message))
    return dict(json.loads(ws.receive_text()))


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


def play_counter(
    step: Callable[[dict[str, Any]], dict[str, Any]], messages: list[dict[str, Any]]
) -> dict[str, Any]:
    """Bring the counter to its target through `step` (an action in, OpenEnv's step answer out)."""
    value = int(step(call("read"))["observation"]["result"]["data"])
    target = target_of(messages)
    while value != target:
        value = int(
            step(call("add", amount=max(-10, min(10, target - value))))["observation"]["result"]["data"]
        )
    return step(call("submit"))


def test_ws_episode_played_to_the_end_is_stored_with_its_reward_and_lineage(tmp_path: Path) -> None:
    with gym(tmp_path) as client, client.websocket_connect(WS) as ws:
        opened = send(
            ws, "reset", {"task_id": "counter-0001", "seed": 3, "episode_id": "mine-1", "run": "r1"}
        )
        assert opened["type"] == "observation"
        observation = opened["data"]["observation"]
        session_id = observation["metadata"][EPISODE]["session_id"]
        assert [tool["name"] for tool in observation["tools"]] == ["read", "add", "submit"]
        assert all("input_schema" in tool for tool in observation["tools"])

        def step(action: dict[str, Any]) -> dict[str, Any]:
            answer = send(ws, "step", action)
            assert answer["type"] == "observation", answer
            return dict(answer["data"])

        final = play_counter(step, observation["messages"])
        assert (final["done"], final["reward"]) == (True, 1.0)
        state = send(ws, "state")
        assert state["type"] == "state"
        assert state["data"]["episode_id"] == session_id
        assert state["data"]["done"] is True
        ws.send_text(json.dumps({"type": "close"}))
        record = stored(client, session_id, "completed")
    assert record["reward"] == final["reward"] == 1.0
    assert record["metadata"] == {"protocol": "openenv", "transport": "ws", "episode_id": "mine-1"}
    assert (record["run"], record["task_id"], record["seed"]) == ("r1", "counter-0001", 3)
    calls = [m["tool_calls"][0]["function"]["name"] for m in record["messages"] if m.get("tool_calls")]
    assert calls[0] == "read" and calls[-1] == "submit"
    assert record["num_turns"] == state["data"]["step_count"] == len(calls)


def test_ws_malformed_input_gets_openenv_errors_and_the_episode_goes_on(tmp_path: Path) -> None:
    with gym(tmp_path, limits={"max_body_bytes": 4096}) as client:
        with client.websocket_connect(WS) as ws:
            assert send(ws, "step", call("read"))["data"]["code"] == "SESSION_ERROR"  # before any reset
            session_id = send(ws, "reset", {"task_id": "counter-0000"})["data"]["observation"]["metadata"][
                EPISODE
            ]["session_id"]
            ws.send_text("{not json")
            assert json.loads(ws.receive_text())["data"]["code"] == "INVALID_JSON"
            ws.send_text("NaN")
            assert json.loads(ws.receive_text())["data"]["code"] == "INVALID_JSON"
            ws.send_text("[1]")
            assert json.loads(ws.receive_text())["data"]["code"] == "VALIDATION_ERROR"
            assert send(ws, "mcp", {"jsonrpc": "2.0"})["data"]["code"] == "UNKNOWN_TYPE"
            bad = send(ws, "step", {"type": "call_tool", "arguments": {}})
            assert bad["type"] == "error"
            assert bad["data"]["code"] == "VALIDATION_ERROR"
            assert bad["data"]["errors"][0]["loc"] == ["action", "call_tool", "tool_name"]
            assert send(ws, "step")["data"]["code"] == "VALIDATION_ERROR"  # no data
            assert send(ws, "reset", {"temperature": 2})["data"]["code"] == "VALIDATION_ERROR"
            ws.send_text(json.dumps({"type": "step", "data": call("add", amount=1, pad="x" * 5000)}))
            assert json.loads(ws.receive_text())["data"]["code"] == "VALIDATION_ERROR"  # over max_body_bytes
            # A bad tool call the gym answers as a tool message is a step, as natively: stored, not fatal.
            wrong = send(ws, "step", call("add", amount="lots"))["data"]["observation"]
            assert wrong["error"]["error_type"] == "invalid_args"
            unknown = send(ws, "step", call("explode"))["data"]["observation"]
            assert unknown["error"]["error_type"] == "tool_not_found"
            listed = send(ws, "step", {"type": "list_tools"})["data"]["observation"]
            assert [tool["name"] for tool in listed["tools"]] == ["read", "add", "submit"]
            assert send(ws, "step", call("read"))["data"]["observation"]["result"]["data"].isdigit()
            assert send(ws, "state")["data"]["step_count"] == 3
        record = stored(client, session_id, "abandoned")  # the connection ended unfinished: closed, stored
    assert record["num_turns"] == 3


def test_ws_message_action_steps_a_whole_assistant_message(tmp_path: Path) -> None:
    message = {
        "role": "assistant",
        "content": "reading twice",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "read", "arguments": "{}"}},
        ],
    }
    with gym(tmp_path) as client, client.websocket_connect(WS) as ws:
        send(ws, "reset", {"task_id": "counter-0000", "seed": 1})
        answer = send(ws, "step", {"type": "message", "message": message})["data"]
        assert [reply["tool_call_id"] for reply in answer["observation"]["messages"]] == ["a", "b"]
        assert (
            send(ws, "step", {"type": "message", "message": {"role": "user", "content": "x"}})["data"]["code"]
            == "VALIDATION_ERROR"
        )


def test_ws_second_reset_stores_the_first_episode_and_disconnect_stores_the_second(tmp_path: Path) -> None:
    with gym(tmp_path) as client:
        with client.websocket_connect(WS) as ws:
            first = send(ws, "reset", {"task_id": "counter-0000"})["data"]["observation"]["metadata"][EPISODE]
            send(ws, "step", call("read"))
            second = send(ws, "reset", {"task_id": "counter-0001"})["data"]["observation"]["metadata"][
                EPISODE
            ]
            assert stored(client, first["session_id"], "abandoned")["num_turns"] == 1
            assert client.get(f"/v1/sessions/{second['session_id']}").status_code == 200
        assert stored(client, second["session_id"], "abandoned")["task_id"] == "counter-0001"
        assert client.app.state.manager.live_count == 0  # type: ignore[attr-defined]


def test_capacity_ttl_and_unknown_names_answer_openenv_errors(tmp_path: Path) -> None:
    with gym(tmp_path, sessions={"max_sessions": 1, "default_ttl_s": 0.3, "retry_after_s": 2}) as client:
        taken = client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0000"})
        assert taken.status_code == 201
        with client.websocket_connect(WS) as ws:
            refused = send(ws, "reset", {"task_id": "counter-0000"})
            assert refused["type"] == "error"
            assert refused["data"]["code"] == "CAPACITY_REACHED"
            assert refused["data"]["max_sessions"] == 1
            assert refused["data"]["problem"]["status"] == 429
            assert refused["data"]["problem"]["retry_after_s"] == 2
            http_refused = client.post(f"{HTTP}/reset", json={})
            assert http_refused.status_code == 429
            assert http_refused.headers["retry-after"] == "2"
            assert client.delete(f"/v1/sessions/{taken.json()['session_id']}").status_code == 204
            # The slot is free: the same connection opens its episode now, then lets it idle past its TTL.
            opened = send(ws, "reset", {"task_id": "counter-0000"})["data"]["observation"]["metadata"][
                EPISODE
            ]
            time.sleep(0.5)
            expired = send(ws, "step", call("read"))
            assert expired["data"]["code"] == "SESSION_ERROR"
            assert expired["data"]["problem"]["status"] == 410
            assert send(ws, "reset", {"task_id": "counter-9999"})["data"]["code"] == "FACTORY_ERROR"
        assert stored(client, opened["session_id"], "expired")["failure"] == "expired"
        with client.websocket_connect("ws://localhost/v1/environments/nope/openenv/ws") as ws:
            unknown = send(ws, "reset", {})
            assert unknown["data"]["code"] == "FACTORY_ERROR"
            assert unknown["data"]["problem"]["status"] == 404


def test_http_reset_step_state_play_an_episode_closed_and_stored_when_done(tmp_path: Path) -> None:
    with gym(tmp_path) as client:
        opened = client.post(f"{HTTP}/reset", json={"task_id": "counter-0002", "seed": 5})
        assert opened.status_code == 200, opened.text
        body = opened.json()
        assert (body["reward"], body["done"]) == (None, False)
        session_id = body["observation"]["metadata"][EPISODE]["session_id"]

        def step(action: dict[str, Any]) -> dict[str, Any]:
            response = client.post(f"{HTTP}/step", json={"action": action, "episode_id": session_id})
            assert response.status_code == 200, response.text
            return dict(response.json())

        malformed = client.post(f"{HTTP}/step", json={"action": {"type": "call"}, "episode_id": session_id})
        assert malformed.status_code == 422
        assert malformed.json()["errors"][0]["loc"].startswith("body.action")
        state = client.get(f"{HTTP}/state", params={"episode_id": session_id})
        assert state.status_code == 200
        assert state.json()["step_count"] == 0  # the malformed action never reached the environment
        final = play_counter(step, body["observation"]["messages"])
        assert (final["done"], final["reward"]) == (True, 1.0)
        record = stored(client, session_id, "completed")  # closed by the final step, committed before it
        assert record["reward"] == 1.0
        assert record["metadata"] == {"protocol": "openenv", "transport": "http"}
        after = client.post(f"{HTTP}/step", json={"action": call("read"), "episode_id": session_id})
        assert after.status_code == 410
        other = client.post("/v1/environments/math/openenv/reset", json={})
        math_id = other.json()["observation"]["metadata"][EPISODE]["session_id"]
        assert client.get(f"{HTTP}/state", params={"episode_id": math_id}).status_code == 404
        assert (
            client.post(
                f"{HTTP}/reset", content=b"[", headers={"content-type": "application/json"}
            ).status_code
            == 422
        )
        assert client.post(f"{HTTP}/reset", json={"bogus": 1}).status_code == 422


def test_http_step_obeys_the_body_limit_media_type_and_the_native_tool_call_checks(tmp_path: Path) -> None:
    with gym(tmp_path, limits={"max_body_bytes": 2048}) as client:
        opened = client.post(f"{HTTP}/reset", json={"task_id": "counter-0000"})
        session_id = opened.json()["observation"]["metadata"][EPISODE]["session_id"]
        big = {"episode_id": session_id, "action": call("add", amount=1, pad="x" * 4000)}
        assert client.post(f"{HTTP}/step", json=big).status_code == 413
        plain = client.post(f"{HTTP}/step", content=b"{}", headers={"content-type": "text/plain"})
        assert plain.status_code == 415
        # A name the native step refuses (it cannot be stored as UTF-8): 422, nothing stored.
        body = json.dumps({"episode_id": session_id, "action": call("\ud800")})  # escaped: valid JSON text
        surrogate = client.post(f"{HTTP}/step", content=body, headers={"content-type": "application/json"})
        assert surrogate.status_code == 422, surrogate.text
        assert client.get(f"{HTTP}/state", params={"episode_id": session_id}).json()["step_count"] == 0
        ok = client.post(f"{HTTP}/step", json={"episode_id": session_id, "action": call("read")})
        assert ok.status_code == 200
        assert ok.json()["observation"]["result"]["data"].isdigit()


def test_tools_and_state_are_answered_before_any_reset(tmp_path: Path) -> None:
    # OpenEnv lists tools without an episode (its MCPToolClient may do so first thing after connecting).
    with gym(tmp_path) as client:
        catalog = [
            tool["function"]["name"] for tool in client.get("/v1/environments/counter").json()["tools"]
        ]
        with client.websocket_connect(WS) as ws:
            listed = send(ws, "step", {"type": "list_tools"})["data"]
            assert [tool["name"] for tool in listed["observation"]["tools"]] == catalog
            assert listed["done"] is False
            fresh = send(ws, "state")["data"]
            assert (fresh["episode_id"], fresh["step_count"]) == (None, 0)
            assert send(ws, "step", call("read"))["data"]["code"] == "SESSION_ERROR"  # a call needs a reset
        assert client.app.state.manager.live_count == 0  # type: ignore[attr-defined]  # nothing was opened
        state = client.get(f"{HTTP}/state")
        assert state.status_code == 200 and state.json()["episode_id"] is None
        assert client.get("/v1/environments/nope/openenv/state").status_code == 404


def test_the_routes_an_openenv_server_describes_itself_with(tmp_path: Path) -> None:
    with gym(tmp_path) as client:
        assert client.get(f"{HTTP}/health").json() == {"status": "healthy"}
        metadata = client.get(f"{HTTP}/metadata").json()
        assert metadata["name"] == "counter" and metadata["description"]
        schema = client.get(f"{HTTP}/schema").json()
        assert {"action", "observation", "state"} <= set(schema)
        assert "call_tool" in json.dumps(schema["action"])
        document = client.get(f"{HTTP}/openapi.json").json()
        assert document["info"]["version"] == "1.0.0"
        assert {"/reset", "/step", "/state", "/health", "/metadata", "/schema", "/mcp"} <= set(
            document["paths"]
        )
        listed = client.post(f"{HTTP}/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).json()
        assert listed["id"] == 3 and [tool["name"] for tool in listed["result"]["tools"]] == [
            "read",
            "add",
            "submit",
        ]
        empty = client.post(f"{HTTP}/mcp", json={})
        assert empty.status_code == 200 and empty.json()["error"]["code"] == -32600
        other = client.post(f"{HTTP}/mcp", json={"jsonrpc": "2.0", "id": 4, "method": "tools/call"}).json()
        assert other["error"]["code"] == -32601 and "/ws or /step" in other["error"]["message"]
        assert client.get("/v1/environments/nope/openenv/health").status_code == 404


def test_a_call_that_ends_the_episode_without_a_reply_is_a_success(tmp_path: Path) -> None:
    answer = call("list_events", date="2025-03-29")  # `tool_call` scores it, never runs it: no reply
    with gym(tmp_path) as client:
        with client.websocket_connect("ws://localhost/v1/environments/tool_call/openenv/ws") as ws:
            send(ws, "reset", {"task_id": "tool_call-00001"})
            done = send(ws, "step", answer)["data"]
        reset = client.post("/v1/environments/tool_call/openenv/reset", json={"task_id": "tool_call-00001"})
        episode = reset.json()["observation"]["metadata"][EPISODE]["session_id"]
        stepped = client.post(
            "/v1/environments/tool_call/openenv/step", json={"episode_id": episode, "action": answer}
        )
    for result in (done, stepped.json()):
        assert (result["done"], result["reward"]) == (True, 1.0)
        observation = result["observation"]
        assert observation["error"] is None
        assert observation["result"] == {
            "content": [],
            "structured_content": None,
            "data": None,
            "is_error": False,
        }


def reset_over_ws(client: TestClient) -> None:
    with client.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "counter-0000"}}))
        ws.receive()


def test_a_reset_whose_answer_fails_leaves_no_episode_on_either_transport(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from gym_server.protocols.openenv import mapping

    def broken(*args: Any) -> dict[str, Any]:
        raise RuntimeError("the answer cannot be written")

    monkeypatch.setattr(mapping, "reset_result", broken)
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'gym.db'}"))
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        assert client.post(f"{HTTP}/reset", json={"task_id": "counter-0000"}).status_code == 500
        assert app.state.manager.live_count == 0
        # The test client hands the handler's failure back when the connection ends.
        with pytest.raises(RuntimeError, match="cannot be written"):
            reset_over_ws(client)
        deadline = time.monotonic() + STORE_WAIT_S
        while (listed := client.get("/v1/rollouts").json())["total"] < 2:
            assert time.monotonic() < deadline, listed
            time.sleep(0.02)
        assert [item["status"] for item in listed["items"]] == ["abandoned", "abandoned"]
        assert app.state.manager.live_count == 0
