"""Forks of a sandboxed environment (terminal, on bubblewrap and Docker): each fork replays the episode in
a fresh sandbox of its own (files written before the branch point are there, what a fork writes is not
seen by its siblings or the parent), and a command whose output is not a function of the task (a random
UUID) refuses the fork with a 409 naming the turn, with no sandbox left admitted."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import AppHarness, serving
from envsandbox import BACKENDS, installed_backend
from gymtest import assert_problem, call, step

from gym_env_terminal.env import TerminalEnv


def shell(command: str) -> dict[str, Any]:
    return call("run", {"command": command})


async def run(client: httpx.AsyncClient, session_id: str, command: str) -> str:
    reply = await step(client, session_id, shell(command))
    assert reply.status_code == 200, reply.text
    return str(reply.json()["messages"][0]["content"])


async def running(gym: AppHarness) -> int:
    ready = (await gym.client.get("/readyz")).json()
    return int(ready["sandbox"]["admission"]["running"])


@pytest.mark.parametrize("backend", BACKENDS)
async def test_terminal_forks_each_replay_in_their_own_sandbox(backend: str, tmp_path: Path) -> None:
    settings = {
        "server_name": f"fork-{uuid.uuid4().hex[:8]}",
        "sandbox": {"backend": backend, "pool_size": 0},
    }
    task = TerminalEnv.dataset().tasks("validation")[0]
    async with installed_backend(backend):
        pass  # skips the test where this backend cannot run sandboxes (no engine, no image)
    async with serving(tmp_path, **settings) as gym:
        client = gym.client
        created = await client.post("/v1/sessions", json={"env": "terminal", "task_id": task.id, "seed": 0})
        assert created.status_code == 201, created.text
        parent = created.json()["session_id"]
        await run(client, parent, "echo branch-point > note.txt")
        response = await client.post(f"/v1/sessions/{parent}/fork", json={"turn": 1, "n": 2})
        assert response.status_code == 201, response.text
        assert response.json()["fork_mode"] == "replay"
        first, second = (item["session_id"] for item in response.json()["forks"])
        assert "branch-point" in await run(client, first, "cat note.txt")
        await run(client, first, "echo first > note.txt")
        assert "branch-point" in await run(client, second, "cat note.txt")
        assert "branch-point" in await run(client, parent, "cat note.txt")

        # Not deterministic from here on: the fork is refused, and its replays' sandboxes go back.
        await run(client, parent, "cat /proc/sys/kernel/random/uuid")
        before = await running(gym)
        problem = assert_problem(
            await client.post(f"/v1/sessions/{parent}/fork", json={"turn": 3, "n": 2}),
            409,
            "diverged at turn 3",
        )
        assert problem["where"].startswith("the replies[0].content")
        assert await running(gym) == before
        assert gym.app.state.manager.live_count == 3
        for session_id in (parent, first, second):
            assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        assert await running(gym) == 0
