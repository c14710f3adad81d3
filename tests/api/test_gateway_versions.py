"""Partial rollouts through the episode gateway: each call records the policy version its run had
announced when the call arrived, the episode keeps its oldest and newest, and its samples say that they
span versions (their per-token logprobs are each the sampling version's own)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import cast

import orjson
import pytest
from conftest import AppHarness, serving

RUN = "gateway-versions"


def _answer(call: int) -> bytes:
    """A token-exact answer whose prompt extends the previous call's sequence (one sample)."""
    prompt = [1, 2, 3] + [7, 8] * call
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "ok"},
        "finish_reason": "stop",
        "token_ids": [7],
        "logprobs": {"content": [{"token": "t", "logprob": -0.5}]},
    }
    body = orjson.dumps({"id": "c", "model": "m", "prompt_token_ids": prompt, "choices": [choice]})
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


class _Policy(asyncio.Protocol):
    """One connection to the scripted policy: a whole request in, `_answer(n)` out for the n-th call."""

    served = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.received = b""

    def data_received(self, data: bytes) -> None:
        self.received += data
        head, _, body = self.received.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length:\s*(\d+)", head)
        if length is None or len(body) < int(length.group(1)):
            return  # not whole yet
        self.transport.write(_answer(_Policy.served))
        _Policy.served += 1
        self.transport.close()


@asynccontextmanager
async def upstream() -> AsyncIterator[str]:
    """The scripted policy on loopback, its calls counted from 0."""
    _Policy.served = 0
    server = await asyncio.get_running_loop().create_server(_Policy, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        server.close()


@pytest.fixture
async def gym(tmp_path: Path) -> AsyncIterator[AppHarness]:
    async with serving(tmp_path) as harness:
        yield harness


async def test_calls_record_the_version_announced_when_they_arrive(gym: AppHarness) -> None:
    client = gym.client
    assert (await client.post(f"/v1/policy-runs/{RUN}/versions", json={"version": 4})).status_code == 200
    async with upstream() as url:
        created = await client.post(
            "/v1/sessions",
            json={"env": "counter", "task_id": "counter-0000", "run": RUN, "gateway": {"upstream": url}},
        )
        episode = created.json()
        chat = f"{episode['gateway']['base_url']}/chat/completions"
        body = {"messages": [{"role": "user", "content": "hi"}]}
        assert (await client.post(chat, json=body)).status_code == 200
        assert (await client.post(f"/v1/policy-runs/{RUN}/versions", json={"version": 5})).status_code == 200
        assert (await client.post(chat, json=body)).status_code == 200
    sid = episode["session_id"]
    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
    stored = (await client.get(f"/v1/rollouts/{sid}")).json()
    assert [turn["weight_version"] for turn in stored["turns"]] == ["4", "5"]
    assert (stored["version_min"], stored["version_max"]) == (4, 5)
    [sample] = (await client.get(f"/v1/rollouts/{sid}/samples")).json()["samples"]
    assert sample["weight_versions"] == [4, 5] and sample["spans_versions"] is True
    assert sample["logprobs"] == [-0.5, 0.0, -0.5]  # each sampled token keeps its own version's

    # the filters and the inspector show them
    async def listed(query: str) -> int:
        response = await client.get(f"/v1/rollouts?run={RUN}&{query}")
        assert response.status_code == 200, response.text
        return int(response.json()["total"])

    assert [
        await listed(q) for q in ("min_version=4", "min_version=5", "max_version=5", "max_version=4")
    ] == [
        1,
        0,
        1,
        0,
    ]
    page = await client.get(f"/ui/trajectories/{sid}")
    assert "4–5 (the weights changed mid-episode)" in page.text
    filtered = await client.get("/ui/trajectories?min_version=5")
    assert filtered.status_code == 200 and sid not in filtered.text
    assert sid in (await client.get("/ui/trajectories?min_version=4&max_version=5")).text
    assert (await client.get("/v1/rollouts?min_version=-1")).status_code == 422
