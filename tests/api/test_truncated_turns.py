"""`POST /v1/sessions/{id}/truncated-turn`: a turn the client cut at its token budget reaches the stored
trajectory without stepping the environment, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from conftest import AppHarness
from gymtest import call, open_counter, step, target_of, wait_for_rollout

CUT = {
    "turn": 2,
    "env_ids": [7, 8],
    "completion_ids": [9, 10, 11],
    "logprobs": [-0.1, -0.2, -0.3],
    "finish_reason": "length",
}


async def cut(client: httpx.AsyncClient, session_id: str, body: Any) -> httpx.Response:
    url = f"/v1/sessions/{session_id}/truncated-turn"
    if isinstance(body, bytes):  # JSON that httpx would not encode
        return await client.post(url, content=body, headers={"content-type": "application/json"})
    return await client.post(url, json=body)


def assert_problem(response: httpx.Response, status: int, needle: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert needle in response.json()["detail"]
    assert "Traceback" not in response.text


async def test_a_truncated_turn_is_stored_but_never_reaches_the_environment(gym: AppHarness) -> None:
    client = gym.client
    session = await open_counter(client)
    sid = session["session_id"]
    first = {"turn": 0, "prompt_ids": [1, 2], "env_ids": [], "completion_ids": [3, 4], "logprobs": [-1, -2]}
    read = await client.post(f"/v1/sessions/{sid}/step", json={"message": call("read"), "turn_data": first})
    value, target = int(read.json()["messages"][0]["content"]), target_of(session["messages"])
    while value != target:
        amount = max(-10, min(10, target - value))
        value = int(
            (await step(client, sid, call("add", {"amount": amount}))).json()["messages"][0]["content"]
        )
    before = (await client.get(f"/v1/sessions/{sid}")).json()

    # The cut text holds a whole submit call: had the environment seen it, `submitted` would be 1.
    text = '<tool_call>{"name": "submit", "arguments": {}}</tool_call> and then'
    response = await cut(client, sid, {"content": text, "turn_data": CUT})
    assert response.status_code == 200, response.text
    assert response.json() == {"turns": 2, "failure": None}

    after = (await client.get(f"/v1/sessions/{sid}")).json()
    assert after["messages"] == before["messages"] and after["turns"] == before["turns"]
    assert after["done"] is False
    verdict = (await client.post(f"/v1/sessions/{sid}/verify")).json()
    assert verdict["components"] == {"reached": 1.0, "submitted": 0.0}
    # No turn can follow a cut one; verify and close still work.
    assert_problem(await step(client, sid, call("submit")), 409, "truncated turn")
    assert_problem(await cut(client, sid, {"content": "again"}), 409, "truncated turn")

    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
    stored = await wait_for_rollout(client, sid, "abandoned")
    assert stored["turns"] == [first, {**CUT, "content": text, "truncated": True}]
    assert stored["messages"] == before["messages"]
    assert stored["num_turns"] == before["turns"] and stored["components"]["submitted"] == 0.0


async def test_the_marker_and_text_are_the_servers(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    sid = session["session_id"]
    forged = {"truncated": False, "content": "not what was cut", "completion_ids": [5]}
    assert (await cut(gym.client, sid, {"content": "cut", "turn_data": forged})).status_code == 200
    await gym.client.delete(f"/v1/sessions/{sid}")
    stored = await wait_for_rollout(gym.client, sid, "abandoned")
    assert stored["turns"] == [{"completion_ids": [5], "content": "cut", "truncated": True}]


async def test_unknown_finished_and_closed_sessions(gym: AppHarness) -> None:
    client = gym.client
    assert_problem(await cut(client, "nope", {"content": "x"}), 404, "no session 'nope'")

    finished = (await open_counter(client))["session_id"]
    assert (await step(client, finished, call("submit"))).json()["done"] is True
    assert_problem(await cut(client, finished, {"content": "x"}), 409, "submitted")

    closed = (await open_counter(client))["session_id"]
    await client.delete(f"/v1/sessions/{closed}")
    assert_problem(await cut(client, closed, {"content": "x"}), 410, "was closed")


async def test_an_expired_session_answers_410(app_factory: Callable[..., Any]) -> None:
    async with app_factory(sessions={"reap_interval_s": 3600}) as gym:
        session = await open_counter(gym.client, ttl_s=0.05)
        await asyncio.sleep(0.1)
        assert_problem(await cut(gym.client, session["session_id"], {"content": "x"}), 410, "expired")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({}, "content"),
        ({"content": 3}, "content"),
        ({"content": "x", "turn_data": [1, 2]}, "turn_data"),
        ({"content": "x", "extra": 1}, "extra"),
        (b'{"content": "half a pair \\ud800"}', "surrogate"),
    ],
)
async def test_malformed_bodies_are_422_and_change_nothing(gym: AppHarness, body: Any, needle: str) -> None:
    sid = (await open_counter(gym.client))["session_id"]
    response = await cut(gym.client, sid, body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert needle in response.text
    assert (await step(gym.client, sid, call("read"))).status_code == 200


async def test_an_oversized_body_is_413_and_changes_nothing(app_factory: Callable[..., Any]) -> None:
    async with app_factory(limits={"max_body_bytes": 4096}) as gym:
        sid = (await open_counter(gym.client))["session_id"]
        assert_problem(await cut(gym.client, sid, {"content": "y" * 10_000}), 413, "over the limit")
        assert (await step(gym.client, sid, call("read"))).status_code == 200


async def test_the_text_counts_towards_the_transcript_budget(app_factory: Callable[..., Any]) -> None:
    async with app_factory(limits={"max_transcript_bytes": 4096}) as gym:
        sid = (await open_counter(gym.client))["session_id"]
        response = await cut(gym.client, sid, {"content": "z" * 5000})
        assert response.json() == {"turns": 1, "failure": "max_transcript_bytes"}
        await gym.client.delete(f"/v1/sessions/{sid}")
        stored = await wait_for_rollout(gym.client, sid, "failed")
        assert stored["failure"] == "max_transcript_bytes" and stored["turns"][0]["truncated"] is True


async def test_concurrent_cuts_are_serialized_and_only_one_is_kept(gym: AppHarness) -> None:
    sid = (await open_counter(gym.client))["session_id"]
    responses = await asyncio.gather(*(cut(gym.client, sid, {"content": f"cut {i}"}) for i in range(10)))
    assert sorted(r.status_code for r in responses) == [200] + [409] * 9
    await gym.client.delete(f"/v1/sessions/{sid}")
    stored = await wait_for_rollout(gym.client, sid, "abandoned")
    assert len(stored["turns"]) == 1


async def test_the_route_is_documented(gym: AppHarness) -> None:
    spec = (await gym.client.get("/openapi.json")).json()
    route = spec["paths"]["/v1/sessions/{session_id}/truncated-turn"]["post"]
    body = route["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/TruncatedTurnRequest")
    assert spec["components"]["schemas"]["TruncatedTurnRequest"]["examples"]
    assert {"200", "404", "409", "410", "413", "422"} <= set(route["responses"])
