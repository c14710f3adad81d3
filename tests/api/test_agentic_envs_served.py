"""The terminal, repo_repair and support environments behind the real app, as `gym-server eval` drives them:
listed in the catalog with their tools, tasks served without their answers, and a session played over
HTTP with each environment's reference solution scoring 1.0 (sandboxes: bubblewrap)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import serving
from gymtest import step

from gym_env_repo_repair.env import RepoRepairEnv
from gym_env_support.env import SupportEnv
from gym_env_terminal.env import TerminalEnv
from gym_server.sdk.environment import Environment

ENVS: list[type[Environment]] = [TerminalEnv, RepoRepairEnv, SupportEnv]


@pytest.mark.bwrap
async def test_each_environment_is_served_and_its_reference_solution_scores_one(tmp_path: Path) -> None:
    sandbox = {"backend": "bubblewrap", "pool_size": 0}
    async with serving(tmp_path, server_name=f"agentic-{uuid.uuid4().hex[:8]}", sandbox=sandbox) as gym:
        client = gym.client
        for env in ENVS:
            catalog = (await client.get(f"/v1/environments/{env.name}")).json()
            assert {tool["function"]["name"] for tool in catalog["tools"]} == set(env.tool_specs)
            listed = (await client.get(f"/v1/environments/{env.name}/tasks", params={"limit": 2})).json()
            assert listed["tasks"] and all("answer" not in task for task in listed["tasks"])
            task = env.dataset().tasks("validation")[0]
            created = await client.post("/v1/sessions", json={"env": env.name, "task_id": task.id, "seed": 0})
            assert created.status_code == 201, created.text
            session_id = created.json()["session_id"]
            for message in env(task, 0).reference_solution() or []:
                reply = await step(client, session_id, message)
                assert reply.status_code == 200, reply.text
                if reply.json()["done"]:
                    break
            assert reply.json()["done"] is True and reply.json()["reward"] == 1.0, (env.name, reply.json())
            assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
