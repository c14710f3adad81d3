"""Bad input never gets a bare 500 or a traceback: each case gets its problem+json status and detail,
and a model's bad tool call becomes a tool message while the episode goes on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import AppHarness
from gymtest import assert_problem, call, open_counter, say, step


async def test_malformed_json(gym: AppHarness) -> None:
    response = await gym.client.post(
        "/v1/sessions", content=b'{"env": "counter", ', headers={"content-type": "application/json"}
    )
    assert_problem(response, 422, "not valid JSON")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"env": 5, "task_id": "counter-0000"}, "env"),
        ({"env": "counter", "task_id": "counter-0000", "task": {"id": "t", "prompt": "p"}}, "at most one"),
        ({"env": "counter", "task_id": "counter-0000", "split": "train"}, "split"),
        ({"env": "counter", "task_id": "counter-0000", "seed": -1}, "seed"),
        ({"env": "counter", "task_id": "counter-0000", "ttl_s": "soon"}, "ttl_s"),
        ({"env": "counter", "task_id": "counter-0000", "surprise": 1}, "surprise"),
        ({"env": "counter", "task_id": "counter-0000", "run": "a\u0000b"}, "run"),
        ({"env": "counter", "task": {"id": "t\u0000", "prompt": "p", "answer": 1}}, "task.id"),
        ([1, 2, 3], "body"),
    ],
)
async def test_wrong_types_are_422(gym: AppHarness, body: Any, needle: str) -> None:
    assert_problem(await gym.client.post("/v1/sessions", json=body), 422, needle)


async def test_unknown_env_task_session_route(gym: AppHarness) -> None:
    body = assert_problem(
        await gym.client.post("/v1/sessions", json={"env": "nope", "task_id": "x"}), 404, "nope"
    )
    assert "counter" in body["detail"]
    assert_problem(await gym.client.post("/v1/sessions", json={"env": "counter", "task_id": "x"}), 404, "'x'")
    assert_problem(await step(gym.client, "missing", say("hi")), 404, "missing")
    assert_problem(await gym.client.post("/v1/sessions/missing/verify"), 404, "missing")
    assert_problem(await gym.client.get("/v1/sessions/missing"), 404, "missing")
    assert_problem(await gym.client.delete("/v1/sessions/missing"), 404, "missing")
    assert_problem(await gym.client.get("/v1/nowhere"), 404, "no route")
    assert_problem(await gym.client.put("/v1/sessions"), 405, "Method Not Allowed")


async def test_oversized_body_is_413(app_factory: Callable[..., Any]) -> None:
    async with app_factory(limits={"max_body_bytes": 4096}) as gym:
        session = await open_counter(gym.client)
        response = await step(gym.client, session["session_id"], say("y" * 10_000))
        assert_problem(response, 413, "over the limit of 4096 bytes")

        async def chunks() -> Any:
            for _ in range(10):
                yield b"z" * 1000

        chunked = await gym.client.post(
            f"/v1/sessions/{session['session_id']}/step",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert_problem(chunked, 413, "over the limit")
        # The session is untouched and still playable.
        assert (await step(gym.client, session["session_id"], call("read"))).status_code == 200


async def test_step_after_done_is_409(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    assert (await step(gym.client, session["session_id"], call("submit"))).json()["done"] is True
    assert_problem(await step(gym.client, session["session_id"], call("read")), 409, "finished")


async def test_closed_session_step_is_410(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    await gym.client.delete(f"/v1/sessions/{session['session_id']}")
    assert_problem(await step(gym.client, session["session_id"], call("read")), 410, "was closed")


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "pretend"},
        {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]},
        {"role": "assistant", "content": 12},
        {"role": "assistant", "tool_calls": "add"},
    ],
)
async def test_malformed_messages_are_422_and_lose_nothing(gym: AppHarness, message: dict[str, Any]) -> None:
    session = await open_counter(gym.client)
    response = await gym.client.post(f"/v1/sessions/{session['session_id']}/step", json={"message": message})
    assert_problem(response, 422, "")
    state = (await gym.client.get(f"/v1/sessions/{session['session_id']}")).json()
    assert state["turns"] == 0 and not state["done"]


async def test_lone_surrogate_is_422(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    raw = b'{"message": {"role": "assistant", "content": "half a pair \\ud800"}}'
    response = await gym.client.post(
        f"/v1/sessions/{session['session_id']}/step",
        content=raw,
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 422, "not valid JSON")
    verify = b'{"env": "counter", "task_id": "counter-0000", "completion": "half \\udc00 a pair"}'
    response = await gym.client.post(
        "/v1/verify", content=verify, headers={"content-type": "application/json"}
    )
    assert_problem(response, 422, "surrogate")


@pytest.mark.parametrize(
    "name", ["__init__", "/v1/sessions", "verify", "_touch", "setup", "../../etc/passwd", ""]
)
async def test_tool_names_outside_the_allow_list_are_tool_messages(gym: AppHarness, name: str) -> None:
    session = await open_counter(gym.client)
    response = await step(gym.client, session["session_id"], call(name))
    assert response.status_code == 200
    reply = response.json()
    assert reply["done"] is False
    assert reply["messages"][0]["content"].startswith("Error: unknown tool")


@pytest.mark.parametrize(
    "arguments", ["{not json", "[]", '{"amount": "lots"}', '{"amount": 1, "extra": 2}', "null"]
)
async def test_bad_tool_arguments_are_tool_messages(gym: AppHarness, arguments: str) -> None:
    session = await open_counter(gym.client)
    reply = (await step(gym.client, session["session_id"], call("add", arguments))).json()
    assert reply["messages"][0]["content"].startswith("Error:")
    assert reply["done"] is False


async def test_a_thousand_tool_calls_each_get_an_answer(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "add", "arguments": '{"amount": 1}'}}
        for i in range(1000)
    ]
    reply = (await step(gym.client, session["session_id"], {"role": "assistant", "tool_calls": calls})).json()
    assert len(reply["messages"]) == 1000
    assert [m["tool_call_id"] for m in reply["messages"]] == [f"c{i}" for i in range(1000)]
    executed = [m for m in reply["messages"] if not m["content"].startswith("Error")]
    assert len(executed) == gym.settings.limits.max_tool_calls_per_turn
    assert "not executed" in reply["messages"][-1]["content"]


@pytest.mark.parametrize(
    "text",
    ["nul \u0000 byte", "emoji 🧪🔥", "rtl \u202eevil", "zero\u200bwidth", "combining e\u0301", "\U0010ffff"],
)
async def test_odd_unicode_round_trips_to_the_store(gym: AppHarness, text: str) -> None:
    from gymtest import wait_for_rollout

    session = await open_counter(gym.client)
    reply = await step(gym.client, session["session_id"], say(text))
    assert reply.status_code == 200
    await gym.client.delete(f"/v1/sessions/{session['session_id']}")
    stored = await wait_for_rollout(gym.client, session["session_id"], "completed")
    assert stored["messages"][2]["content"] == text


async def test_bad_query_parameters(gym: AppHarness) -> None:
    assert_problem(await gym.client.get("/v1/environments/counter/tasks?limit=0"), 422, "limit")
    assert_problem(await gym.client.get("/v1/rollouts?status=sideways"), 422, "status")
    assert_problem(await gym.client.get("/v1/rollouts/nope"), 404, "nope")


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
async def test_write_bodies_that_are_not_json_are_415_and_change_nothing(
    gym: AppHarness, content_type: str | None
) -> None:
    """A browser sends text/plain, form and multipart POSTs cross-origin without a CORS preflight: none of
    them may create, step or score anything."""
    headers = {"content-type": content_type} if content_type else {}
    session_id = (await open_counter(gym.client))["session_id"]
    before = (await gym.client.get(f"/v1/sessions/{session_id}")).json()
    step_body = b'{"message": {"role": "assistant", "content": "", "tool_calls": []}}'
    writes = {
        "/v1/sessions": b'{"env": "counter", "task_id": "counter-0000"}',
        f"/v1/sessions/{session_id}/step": step_body,
        f"/v1/sessions/{session_id}/truncated-turn": b'{"content": "cut"}',
        "/v1/verify": b'{"env": "counter", "task_id": "counter-0000", "messages": []}',
        "/v1/verify/batch": b'{"items": []}',
        "/v1/rollouts": b'{"env": "counter", "policy": {"base_url": "http://127.0.0.1:9/v1"}}',
    }
    live = gym.app.state.manager.live_count
    for path, body in writes.items():
        response = await gym.client.post(path, content=body, headers=headers)
        assert_problem(response, 415, "application/json")
    after = (await gym.client.get(f"/v1/sessions/{session_id}")).json()
    assert after["turns"] == before["turns"] and after["messages"] == before["messages"]
    assert gym.app.state.manager.live_count == live


async def test_json_with_parameters_and_empty_posts_are_accepted(gym: AppHarness) -> None:
    created = await gym.client.post(
        "/v1/sessions",
        content=b'{"env": "counter", "task_id": "counter-0000"}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert created.status_code == 201, created.text
    verified = await gym.client.post(f"/v1/sessions/{created.json()['session_id']}/verify")
    assert verified.status_code == 200, verified.text
