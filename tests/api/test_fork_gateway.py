"""Forks through the episode gateway: a fork of an episode opened with a gateway gets a gateway of its
own to the same upstream (its own URLs, calls and records; the key never stored), and a fork request
may open the forks with a gateway the parent did not have."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from conftest import free_port, serving
from fastapi import FastAPI, Request
from gymtest import call, step, wait_for_rollout

KEY = "sk-upstream-secret-1234"


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[str | None]]]:
    """An OpenAI-compatible chat endpoint on loopback answering every call alike; the keys it was sent."""
    keys: list[str | None] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        keys.append(request.headers.get("authorization"))
        message = {"role": "assistant", "content": "done"}
        return {
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "upstream did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", keys
    server.should_exit = True
    thread.join(10)


async def test_a_fork_of_a_gateway_episode_has_its_own_gateway(
    tmp_path: Path, upstream: tuple[str, list[str | None]]
) -> None:
    url, keys = upstream
    async with serving(tmp_path) as gym:
        client = gym.client
        body = {
            "env": "counter",
            "task_id": "counter-0000",
            "seed": 0,
            "gateway": {"upstream": url, "model": "m", "token_exact": False, "api_key": KEY},
        }
        parent = (await client.post("/v1/sessions", json=body)).json()
        await step(client, parent["session_id"], call("read"))
        response = await client.post(f"/v1/sessions/{parent['session_id']}/fork", json={"turn": 1, "n": 2})
        assert response.status_code == 201, response.text
        forks = response.json()["forks"]
        links = [item["gateway"]["base_url"] for item in forks]
        assert len(set(links)) == 2 and all(
            item["session_id"] in link for item, link in zip(forks, links, strict=True)
        )
        chat = {"model": "m", "messages": forks[0]["messages"]}
        answered = await client.post(f"{links[0]}/chat/completions", json=chat)
        assert answered.status_code == 200, answered.text
        assert keys == [f"Bearer {KEY}"]  # the parent's key, held in memory only
        for item in (*forks, parent):
            assert (await client.delete(f"/v1/sessions/{item['session_id']}")).status_code == 204
        first = await wait_for_rollout(client, forks[0]["session_id"], "abandoned")
        second = await wait_for_rollout(client, forks[1]["session_id"], "abandoned")
        calls = [turn for turn in first["turns"] if turn.get("source") == "gateway"]
        assert len(calls) == 1 and not [t for t in second["turns"] if t.get("source") == "gateway"]
        assert first["metadata"]["gateway"]["upstream"] == url and KEY not in str(first)

        # A parent without a gateway: the request opens the forks with one.
        plain = (await client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0000"})).json()
        spec = {"upstream": url, "token_exact": False}
        response = await client.post(
            f"/v1/sessions/{plain['session_id']}/fork", json={"turn": 0, "gateway": spec}
        )
        assert response.status_code == 201, response.text
        assert response.json()["forks"][0]["gateway"]["base_url"].endswith("/openai/v1")
        no_gateway = await client.post(f"/v1/sessions/{plain['session_id']}/fork", json={"turn": 0})
        assert "gateway" not in no_gateway.json()["forks"][0]
