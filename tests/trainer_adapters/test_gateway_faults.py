"""The episode gateway's bad input and faults, against a small real upstream on loopback whose behaviour
each test sets: down, slow, cut mid-stream, answering without token ids, refusing a call; an upstream
outside the allow-list; unknown and closed episodes; the final answer of an agent with its own tools."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import AppHarness, free_port, serving
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from gateway_helpers import gateway_calls, open_episode, openai_error

from gym_server.api.routers.gateway import _EventStream

PROMPT_IDS, TOKEN_IDS, LOGPROBS = [1, 2, 3], [7, 8, 9], [-0.5, -0.25, -0.125]
KEY = "sk-upstream-secret-1234"


class Upstream:
    """An OpenAI-compatible chat endpoint whose next answers follow `mode`."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat)

    def answer(self, ids: bool) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": "the counter is done"},
            "finish_reason": "stop",
            "logprobs": {"content": [{"token": "t", "logprob": lp} for lp in LOGPROBS]} if ids else None,
        }
        answer: dict[str, Any] = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]}
        if ids:
            choice["token_ids"], answer["prompt_token_ids"] = TOKEN_IDS, PROMPT_IDS
        return answer

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("authorization"))
        if self.mode == "slow":
            await asyncio.sleep(3)
        if self.mode == "refuse":
            error = {"error": {"message": "prompt is too long", "type": "BadRequestError", "code": 400}}
            return JSONResponse(error, status_code=400)
        if self.mode == "broken":
            return JSONResponse({"error": {"message": "CUDA out of memory"}}, status_code=500)
        if self.mode == "cut":
            return StreamingResponse(self.cut(), media_type="text/event-stream")
        return JSONResponse(self.answer(ids=self.mode != "no-ids"))

    async def cut(self) -> AsyncIterator[bytes]:
        chunk = {
            "prompt_token_ids": PROMPT_IDS,
            "choices": [{"index": 0, "delta": {"content": "the"}, "token_ids": [7]}],
        }
        yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        raise RuntimeError("the policy server died mid-stream")


@pytest.fixture
def upstream(serve: Callable[[Any], AbstractContextManager[Any]]) -> Iterator[tuple[Upstream, str]]:
    fake = Upstream()
    with serve(fake.app) as served:
        yield fake, served.url


@pytest.fixture
async def gym(tmp_path: Path) -> AsyncIterator[AppHarness]:
    async with serving(tmp_path, gateway={"upstream_timeout_s": 0.5}) as harness:
        yield harness


async def chat(gym: AppHarness, episode: dict[str, Any], **extra: Any) -> Any:
    body = {"model": "m", "messages": episode["messages"], "tools": episode["tools"], **extra}
    return await gym.client.post(f"{episode['gateway']['base_url']}/chat/completions", json=body)


async def stored(gym: AppHarness, session_id: str) -> dict[str, Any]:
    return dict((await gym.client.get(f"/v1/rollouts/{session_id}")).json())


@pytest.mark.parametrize(
    ("mode", "status", "failure"),
    [("down", 502, "policy_error"), ("slow", 504, "policy_timeout"), ("broken", 502, "policy_error")],
)
async def test_a_failing_upstream_fails_the_episode_and_records_no_call(
    gym: AppHarness, upstream: tuple[Upstream, str], mode: str, status: int, failure: str
) -> None:
    fake, url = upstream
    fake.mode = mode
    episode = await open_episode(gym, f"http://127.0.0.1:{free_port()}" if mode == "down" else url)
    error = openai_error(await chat(gym, episode), status)
    assert error["code"] == failure
    record = await stored(gym, episode["session_id"])  # stored once the call failed
    assert (record["status"], record["failure"], gateway_calls(record)) == ("failed", failure, [])
    assert record["metadata"]["failure_detail"] == error["message"]  # the cause, as the agent read it
    again = openai_error(await chat(gym, episode), 410)
    assert "start a new session" in again["message"]


async def test_a_policy_server_not_up_yet_is_named_with_its_cause_in_the_answer_the_row_and_the_inspector(
    gym: AppHarness,
) -> None:
    """An agent started before its policy server: every episode fails as policy_error, and the answer,
    the stored row and the inspector's page say which URL refused the connection."""
    url = f"http://127.0.0.1:{free_port()}"
    episode = await open_episode(gym, f"{url}/v1")
    error = openai_error(await chat(gym, episode), 502)
    cause = f"the upstream {url}/v1 is unreachable or broke off: ConnectError: connection refused"
    assert error["message"] == cause
    record = await stored(gym, episode["session_id"])
    assert (record["failure"], record["metadata"]["failure_detail"]) == ("policy_error", cause)
    page = await gym.client.get(f"/ui/trajectories/{episode['session_id']}")
    assert page.status_code == 200
    assert f'<dd class="failure-detail">{cause}</dd>' in page.text


async def test_a_stream_cut_midway_ends_in_an_error_event_and_counts_no_call(
    gym: AppHarness, upstream: tuple[Upstream, str]
) -> None:
    fake, url = upstream
    fake.mode = "cut"
    episode = await open_episode(gym, url)
    streamed = await chat(gym, episode, stream=True)
    assert streamed.status_code == 200  # the headers had gone out with the first chunk
    events = [orjson.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert events[0]["choices"][0]["delta"]["content"] == "the"
    assert events[-1]["error"]["code"] == "policy_error"
    record = await stored(gym, episode["session_id"])
    assert (record["status"], record["failure"], gateway_calls(record)) == ("failed", "policy_error", [])
    samples = (await gym.client.get(f"/v1/rollouts/{episode['session_id']}/samples")).json()
    assert (samples["num_calls"], samples["samples"]) == (0, [])


async def test_an_answer_without_token_ids_is_refused_for_training_and_marked_for_evaluation(
    gym: AppHarness, upstream: tuple[Upstream, str]
) -> None:
    fake, url = upstream
    fake.mode = "no-ids"
    training = await open_episode(gym, url)
    error = openai_error(await chat(gym, training), 502)
    assert "return_token_ids" in error["message"] and fake.requests[-1]["return_token_ids"] is True
    record = await stored(gym, training["session_id"])
    assert (record["failure"], gateway_calls(record)) == ("policy_error", [])

    evaluation = await open_episode(gym, url, token_exact=False)
    answer = await chat(gym, evaluation)
    assert answer.status_code == 200 and "return_token_ids" not in fake.requests[-1]
    assert (await gym.client.delete(f"/v1/sessions/{evaluation['session_id']}")).status_code == 204
    record = await stored(gym, evaluation["session_id"])
    [call] = gateway_calls(record)
    assert call["token_exact"] is False and call["completion_ids"] is None
    assert record["metadata"]["gateway"] == {
        "upstream": url,
        "model": None,
        "token_exact": False,
        "num_calls": 1,
    }
    samples = (await gym.client.get(f"/v1/rollouts/{evaluation['session_id']}/samples")).json()
    assert (samples["token_exact"], samples["num_calls"], samples["samples"]) == (False, 1, [])


async def test_a_call_the_upstream_refuses_is_passed_on_and_the_episode_goes_on(
    gym: AppHarness, upstream: tuple[Upstream, str]
) -> None:
    fake, url = upstream
    fake.mode = "refuse"
    episode = await open_episode(gym, url)
    assert "prompt is too long" in openai_error(await chat(gym, episode), 400)["message"]
    fake.mode = "ok"
    assert (await chat(gym, episode)).status_code == 200


async def test_an_upstream_outside_the_allow_list_is_refused_before_any_connection(
    tmp_path: Path, upstream: tuple[Upstream, str]
) -> None:
    fake, url = upstream
    other = f"http://127.0.0.1:{free_port()}"
    async with serving(tmp_path, rollout_runs={"policy_urls": [other]}) as gym:
        body = {"env": "counter", "gateway": {"upstream": url}}
        refused = await gym.client.post("/v1/sessions", json=body)
        assert refused.status_code == 422 and refused.json()["type"].endswith("endpoint-not-allowed")
        assert "gateway.upstream" in refused.json()["detail"]
        assert (await gym.client.get("/v1/rollouts")).json()["total"] == 0  # no episode was opened
    assert fake.requests == []


async def test_the_api_key_goes_to_the_upstream_and_is_never_stored(
    gym: AppHarness, upstream: tuple[Upstream, str]
) -> None:
    fake, url = upstream
    episode = await open_episode(gym, url, api_key=KEY, model="served-name")
    assert (await chat(gym, episode, model="gpt-whatever")).status_code == 200
    assert fake.authorizations == [f"Bearer {KEY}"] and fake.requests[0]["model"] == "served-name"
    assert (await gym.client.delete(f"/v1/sessions/{episode['session_id']}")).status_code == 204
    record = await stored(gym, episode["session_id"])
    assert KEY not in orjson.dumps(record).decode()
    [call] = gateway_calls(record)
    assert (call["prompt_ids"], call["completion_ids"], call["logprobs"]) == (PROMPT_IDS, TOKEN_IDS, LOGPROBS)


async def test_unknown_and_closed_episodes_answer_in_openai_error_shape(
    gym: AppHarness, upstream: tuple[Upstream, str]
) -> None:
    _, url = upstream
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    unknown = await gym.client.post("/v1/sessions/nope/openai/v1/chat/completions", json=body)
    assert openai_error(unknown, 404)["code"] == "session-not-found"
    assert openai_error(await gym.client.get("/v1/sessions/nope/openai/v1/models"), 404)
    episode = await open_episode(gym, url)
    assert openai_error(await chat(gym, episode, n=2), 400)["type"] == "invalid_request_error"
    bad = await gym.client.post(f"{episode['gateway']['base_url']}/chat/completions", json=[1])
    assert openai_error(bad, 400)
    assert (await gym.client.delete(f"/v1/sessions/{episode['session_id']}")).status_code == 204
    assert openai_error(await chat(gym, episode), 410)["code"] == "session-expired"
    plain = (await gym.client.post("/v1/sessions", json={"env": "counter"})).json()
    without = await gym.client.post(
        f"/v1/sessions/{plain['session_id']}/openai/v1/chat/completions", json=body
    )
    assert "without a gateway" in openai_error(without, 404)["message"]


async def test_the_final_answer_of_an_agent_with_its_own_tools_is_scored_and_stored(
    gym: AppHarness, upstream: tuple[Upstream, str]
) -> None:
    _, url = upstream
    episode = await open_episode(gym, url)
    assert (await chat(gym, episode)).status_code == 200
    answered = await gym.client.post(f"/v1/sessions/{episode['session_id']}/answer")  # no body
    assert answered.status_code == 200, answered.text
    assert answered.json()["done"] is True and answered.json()["reward"] == 0.0  # the counter is still at 20
    record = await stored(gym, episode["session_id"])
    assert (record["status"], record["done_reason"], record["reward"]) == ("completed", "answered", 0.0)
    # Omitted, the answer is the content of the last recorded assistant message.
    assert record["messages"][-1] == {"role": "assistant", "content": "the counter is done"}
    assert len(gateway_calls(record)) == 1
    again = await gym.client.post(f"/v1/sessions/{episode['session_id']}/answer", json={"answer": "x"})
    assert again.status_code == 410


async def test_the_fast_path_and_the_route_answer_alike(
    gym: AppHarness, upstream: tuple[Upstream, str]
) -> None:
    """`GatewayFastPath` answers chat calls in front of FastAPI; a request under a root path goes on to
    the FastAPI route, which answers the same, bad input included."""
    _, url = upstream
    episode = await open_episode(gym, url)
    path = f"/v1/sessions/{episode['session_id']}/openai/v1/chat/completions"
    transport = httpx.ASGITransport(app=gym.app, root_path="/gym")
    bodies: list[Any] = [{"model": "m", "messages": episode["messages"]}, [1], {"messages": []}]
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as routed:
        for body in bodies:
            fast = await gym.client.post(path, json=body)
            slow = await routed.post(f"/gym{path}", json=body)
            assert (slow.status_code, slow.json()) == (fast.status_code, fast.json())
    assert (await gym.client.delete(f"/v1/sessions/{episode['session_id']}")).status_code == 204
    record = await stored(gym, episode["session_id"])
    assert [call["call"] for call in gateway_calls(record)] == [0, 1]  # both paths recorded their call


@pytest.mark.parametrize("leaves", [True, False])
async def test_a_stream_stops_when_its_client_is_gone_and_the_source_is_closed(leaves: bool) -> None:
    """The streamed answer's sender (`_EventStream`) ends the stream at the first event after the client
    left, closing the source (the gateway's forwarder then records nothing); a client that stays gets
    every event and the end of the body."""
    closed: list[bool] = []
    sent: list[MutableMapping[str, Any]] = []
    left = asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        try:
            for n in range(5):
                yield b"data: %d\n\n" % n
                await asyncio.sleep(0)
        finally:
            closed.append(True)

    async def receive() -> MutableMapping[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)
        if leaves and len(sent) == 3:  # the head and two events are out: the client goes
            left.set()

    await _EventStream(source(), media_type="text/event-stream")({"type": "http"}, receive, send)
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    if leaves:
        assert len(bodies) < 5 and sent[-1]["more_body"] is True  # cut short, no end of body
    else:
        assert bodies == [b"data: %d\n\n" % n for n in range(5)] + [b""]
    assert closed == [True]
