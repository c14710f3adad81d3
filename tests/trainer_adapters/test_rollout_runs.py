"""`POST /v1/rollouts`: the gym plays episodes against a policy URL with the same driver, token-exact
through the policy's `/tokenize`, and stores them; policy failures are failure classes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import make_settings
from gymtest import apoll

from gym_server.app import create_app
from gym_server.store.records import TrajectoryStatus
from gym_server.store.writer import TrajectoryStore
from gym_trainer.chat import ChatRenderer
from gym_trainer.remote_chat import RemoteRenderer


@pytest.fixture
async def gym(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'gym.db'}"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def stored(gym: httpx.AsyncClient, rollout_id: str) -> dict[str, Any]:
    async def fetch() -> dict[str, Any]:
        return dict((await gym.get(f"/v1/rollouts/{rollout_id}")).json())

    return await apoll(fetch, lambda row: row.get("status") not in (None, "live"))


async def test_remote_renderer_matches_the_local_one(policy_url: str, tiny_tokenizer: Any) -> None:
    local, remote = ChatRenderer(tiny_tokenizer), RemoteRenderer(policy_url, "tiny")
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U é"}]
    tools = [{"type": "function", "function": {"name": "read", "description": "r", "parameters": {}}}]
    assert await remote.prompt_ids(messages, tools) == local.render_prompt(messages, tools).ids
    assert remote.eos_token_ids == local.eos_token_ids
    replies = [{"role": "tool", "content": "20"}, {"role": "user", "content": "more"}]
    assert await remote.delta_ids(replies) == local.render_delta(replies).ids
    ids = [*local.encode("<tool_call>x</tool_call>"), tiny_tokenizer.eos_token_id]
    assert await remote.text(ids) == local.decode(ids)
    assert await remote.turn_text(ids) == local.completion_text(ids)
    await remote.aclose()


async def test_server_driven_rollouts_store_token_level_trajectories(
    gym: httpx.AsyncClient, policy_url: str
) -> None:
    body = {
        "env": "counter",
        "split": "validation",
        "limit": 2,
        "n": 2,
        "seed": 3,
        "policy": {"base_url": policy_url, "model": "tiny"},
        "sampling": {"max_tokens": 24, "seed": 1},
        "max_turns": 2,
        "max_completion_tokens": 80,
        "wait": True,
    }
    response = await gym.post("/v1/rollouts", json=body)
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["status"] == "completed" and run["episodes"] == run["finished"] == 4
    assert run["summary"]["episodes"] == 4 and run["summary"]["failures"] == 0
    again = (await gym.get(f"/v1/rollouts/runs/{run['run_id']}")).json()
    assert again["rollout_ids"] == run["rollout_ids"]
    rows = [await stored(gym, rid) for rid in run["rollout_ids"]]
    assert {row["run"] for row in rows} == {run["run"]}
    for row in rows:
        assert row["policy"]["model"] == "tiny" and row["seed"] == 3
        if row["turns"]:
            first = row["turns"][0]
            assert first["prompt_ids"] and len(first["completion_ids"]) == len(first["logprobs"])

    async def listed() -> dict[str, Any]:
        return dict((await gym.get("/v1/rollouts", params={"run": run["run"]})).json())

    # The single-row route answers from the writer's queue too; the list waits for the database.
    page = await apoll(listed, lambda page: page["total"] == 4)
    assert {item["id"] for item in page["items"]} == set(run["rollout_ids"])


async def test_a_dead_policy_fails_episodes_with_a_failure_class(gym: httpx.AsyncClient) -> None:
    body = {
        "env": "counter",
        "task_ids": ["counter-0000"],
        "policy": {"base_url": "http://127.0.0.1:9", "model": "gone", "api": "chat", "timeout_s": 2},
    }
    accepted = await gym.post("/v1/rollouts", json=body)
    assert accepted.status_code == 202
    run_id = accepted.json()["run_id"]

    async def fetch_run() -> dict[str, Any]:
        return dict((await gym.get(f"/v1/rollouts/runs/{run_id}")).json())

    run = await apoll(fetch_run, lambda run: run["status"] != "running", timeout_s=120)
    assert run["status"] == "completed"
    assert run["summary"]["stop_reasons"] == {"policy_error": 1} and run["summary"]["scored"] == 0
    row = await stored(gym, run["rollout_ids"][0])
    assert row["status"] == "failed" and row["failure"] == "policy_error"


@pytest.mark.parametrize(
    ("patch", "status"),
    [
        ({"env": "nope"}, 404),
        ({"task_ids": ["missing"]}, 404),
        ({"task_ids": ["counter-0000"], "split": "train"}, 422),
        ({"policy": {"base_url": "http://127.0.0.1:9", "model": "m", "api": "grpc"}}, 422),
    ],
)
async def test_bad_run_requests(gym: httpx.AsyncClient, patch: dict[str, Any], status: int) -> None:
    body = {"env": "counter", "policy": {"base_url": "http://127.0.0.1:9", "model": "m"}, **patch}
    response = await gym.post("/v1/rollouts", json=body)
    assert response.status_code == status, response.text
    assert (await gym.get("/v1/rollouts/runs/unknown")).status_code == 404


async def test_a_server_driven_episode_stores_its_cut_turn(gym: httpx.AsyncClient, fake_vllm: Any) -> None:
    from gym_trainer.toolcalls import render_tool_call

    fake_vllm.script = [render_tool_call("read", {}), "!endless"]
    body = {
        "env": "counter",
        "task_ids": ["counter-0000"],
        "policy": {"base_url": fake_vllm.url, "model": "base"},
        "sampling": {"max_tokens": 16},
        "max_turns": 4,
        "wait": True,
    }
    response = await gym.post("/v1/rollouts", json=body)
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["summary"]["stop_reasons"] == {"max_completion_tokens": 1}
    row = await stored(gym, run["rollout_ids"][0])
    assert row["status"] == "abandoned" and row["num_turns"] == 1
    first, cut = row["turns"]
    assert "truncated" not in first and first["prompt_ids"]
    assert cut["truncated"] is True and cut["finish_reason"] == "length" and cut["content"] == "x" * 16
    assert len(cut["completion_ids"]) == len(cut["logprobs"]) == 16 and cut["env_ids"]


async def test_runs_past_the_limit_get_429_and_shutdown_cancels_the_one_playing(
    tmp_path: Path, fake_vllm: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    app = create_app(make_settings(url, rollout_runs={"max_running": 1}))
    fake_vllm.script = ["!hang"]
    body = {
        "env": "counter",
        "task_ids": ["counter-0000"],
        "run": "capped",
        "policy": {"base_url": fake_vllm.url, "model": "base"},
        "sampling": {"max_tokens": 8},
    }

    async def policy_requests() -> int:
        return len(fake_vllm.requests)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as gym:
            accepted = await gym.post("/v1/rollouts", json=body)
            assert accepted.status_code == 202, accepted.text
            await apoll(policy_requests, lambda count: count == 1)  # playing: waiting on the policy
            refused = await gym.post("/v1/rollouts", json=body)
            assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
            assert refused.headers["content-type"] == "application/problem+json"
            assert "maximum of 1 rollout runs playing" in refused.json()["detail"]
        board = app.state.rollout_runs
    # The server stopped: the run was cancelled and its episode closed its session before the store did.
    assert board.view(accepted.json()["run_id"])["status"] == "cancelled"
    store = TrajectoryStore(url)
    await store.start()
    try:
        assert [row.status for row in await store.list(run="capped")] == [TrajectoryStatus.ABANDONED]
    finally:
        await store.stop()


async def test_runs_hold_their_share_of_sessions_and_direct_clients_keep_the_rest(
    tmp_path: Path, fake_vllm: Any
) -> None:
    # 8 sessions: runs together may hold 4, one run at most 3 at once, whatever it asks for.
    settings = make_settings(
        f"sqlite:///{tmp_path / 'gym.db'}",
        sessions={"max_sessions": 8},
        rollout_runs={"max_concurrency": 3, "session_share": 0.5},
    )
    fake_vllm.script = ["!hang"] * 32  # a slow policy: every episode waits on its first completion

    def run_body(name: str) -> dict[str, Any]:
        return {
            "env": "counter",
            "task_ids": ["counter-0000"],
            "n": 16,
            "concurrency": 16,
            "run": name,
            "policy": {"base_url": fake_vllm.url, "model": "base"},
            "sampling": {"max_tokens": 8},
        }

    async def waiting_on_policy() -> int:
        return len(fake_vllm.requests)

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as gym:
            first = await gym.post("/v1/rollouts", json=run_body("first"))
            assert first.status_code == 202, first.text
            await apoll(waiting_on_policy, lambda count: count >= 3)
            second = await gym.post("/v1/rollouts", json=run_body("second"))
            assert second.status_code == 202, second.text
            await apoll(waiting_on_policy, lambda count: count >= 4)
            # The runs are playing and hold 4 sessions; a client playing its own gets the other 4.
            one = {"env": "counter", "task_id": "counter-0000"}
            direct = [await gym.post("/v1/sessions", json=one) for _ in range(4)]
            assert [r.status_code for r in direct] == [201] * 4, direct[0].text
            full = await gym.post("/v1/sessions", json=one)
            assert full.status_code == 429  # the server's own limit still holds
            assert app.state.manager.live_count == 8 and len(fake_vllm.requests) == 4
            for run in (first, second):
                view = (await gym.get(f"/v1/rollouts/runs/{run.json()['run_id']}")).json()
                assert view["status"] == "running" and view["finished"] == 0  # waiting, not failing
                assert view["concurrency"] == 3
