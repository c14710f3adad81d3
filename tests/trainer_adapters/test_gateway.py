"""The episode gateway against the bundled policy server (the tiny model, served by uvicorn on loopback):
an agent's chat calls, whole and streamed, go through the episode's base URL, and the stored token ids are
what the policy sampled (its answer's ids) on the prompt it rendered (its own `/tokenize`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import AppHarness, serving
from gateway_helpers import gateway_calls, open_episode


@pytest.fixture
async def gym(tmp_path: Path) -> AsyncIterator[AppHarness]:
    async with serving(tmp_path) as harness:
        yield harness


def chat_body(episode: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": episode["messages"],
        "tools": episode["tools"],
        "max_tokens": 24,
        "seed": 3,
        **extra,
    }


async def stored_calls(gym: AppHarness, session_id: str) -> list[dict[str, Any]]:
    closed = await gym.client.delete(f"/v1/sessions/{session_id}")
    assert closed.status_code == 204
    record = (await gym.client.get(f"/v1/rollouts/{session_id}")).json()  # a 204 follows the commit
    return gateway_calls(record)


async def test_a_recorded_call_holds_the_tokens_the_policy_sampled(gym: AppHarness, policy_url: str) -> None:
    episode = await open_episode(gym, f"{policy_url}/v1")
    base = episode["gateway"]["base_url"]
    assert base == f"http://localhost/v1/sessions/{episode['session_id']}/openai/v1"
    assert episode["gateway"]["mcp_url"] == f"http://localhost/v1/sessions/{episode['session_id']}/mcp"

    answer = (await gym.client.post(f"{base}/chat/completions", json=chat_body(episode))).json()
    choice = answer["choices"][0]
    async with httpx.AsyncClient(base_url=policy_url) as policy:
        rendered = (
            await policy.post(
                "/tokenize",
                json={"model": "tiny", "messages": episode["messages"], "tools": episode["tools"]},
            )
        ).json()["tokens"]

    [call] = await stored_calls(gym, episode["session_id"])
    assert call["prompt_ids"] == rendered == answer["prompt_token_ids"]
    assert call["completion_ids"] == choice["token_ids"]
    assert call["logprobs"] == [item["logprob"] for item in choice["logprobs"]["content"]]
    assert call["response"] == choice["message"] and call["finish_reason"] == choice["finish_reason"]
    assert call["messages"] == episode["messages"] and call["token_exact"] is True
    assert call["weight_version"] is None  # the episode named no policy revision


async def test_each_call_records_the_policy_revision_of_its_episode(gym: AppHarness, policy_url: str) -> None:
    body = {
        "env": "counter",
        "task_id": "counter-0000",
        "seed": 0,
        "policy": {"model": "tiny", "weight_version": 7},  # a trainer's step: VLLMWeightSync loaded it
        "gateway": {"upstream": policy_url},
    }
    episode = (await gym.client.post("/v1/sessions", json=body)).json()
    base = episode["gateway"]["base_url"]
    for _ in range(2):
        answered = await gym.client.post(f"{base}/chat/completions", json=chat_body(episode))
        assert answered.status_code == 200, answered.text
    calls = await stored_calls(gym, episode["session_id"])
    assert [call["weight_version"] for call in calls] == ["7", "7"]


async def test_a_streamed_call_is_forwarded_and_recorded_alike(gym: AppHarness, policy_url: str) -> None:
    episode = await open_episode(gym, policy_url, model="tiny")
    base = episode["gateway"]["base_url"]
    whole = (await gym.client.post(f"{base}/chat/completions", json=chat_body(episode))).json()
    streamed = await gym.client.post(f"{base}/chat/completions", json=chat_body(episode, stream=True))
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(event) for event in events[:-1]]
    assert (
        "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        == whole["choices"][0]["message"]["content"]
    )

    first, second = await stored_calls(gym, episode["session_id"])
    assert (first["stream"], second["stream"]) == (False, True)
    # Same seed, same prompt: the policy samples the same tokens either way.
    assert second["prompt_ids"] == first["prompt_ids"] and second["completion_ids"] == first["completion_ids"]
    assert (
        second["logprobs"] == first["logprobs"]
        and second["response"]["content"] == first["response"]["content"]
    )

    samples = (await gym.client.get(f"/v1/rollouts/{episode['session_id']}/samples")).json()
    assert samples["num_calls"] == 2 and samples["token_exact"] is True
    # The second call's prompt does not extend the first's prompt and completion: two samples.
    assert [s["calls"] for s in samples["samples"]] == [[0], [1]]
    record = (await gym.client.get(f"/v1/rollouts/{episode['session_id']}")).json()
    assert record["metadata"]["samples"] == {
        "token_exact": True,
        "num_samples": 2,
        "masked_share": samples["masked_share"],
        "num_calls": 2,
    }


async def test_models_is_the_episode_model_or_the_upstream_list(gym: AppHarness, policy_url: str) -> None:
    named = await open_episode(gym, policy_url, model="tiny")
    listed = (await gym.client.get(f"{named['gateway']['base_url']}/models")).json()
    assert [m["id"] for m in listed["data"]] == ["tiny"]
    unnamed = await open_episode(gym, policy_url)
    listed = (await gym.client.get(f"{unnamed['gateway']['base_url']}/models")).json()
    assert [m["id"] for m in listed["data"]] == ["tiny"] and listed["data"][0]["owned_by"] == "gym-server"
