"""Sessions over HTTP: an episode from creation to its stored trajectory, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from conftest import AppHarness
from gymtest import call, open_counter, solve_counter, step, wait_for_rollout


async def test_full_episode_is_scored_and_stored(gym: AppHarness) -> None:
    client = gym.client
    created = await open_counter(client, run="run-a", policy={"model": "hand", "temperature": 0})
    assert created["env"] == "counter"
    assert created["messages"][0]["role"] == "system"
    assert {tool["function"]["name"] for tool in created["tools"]} == {"read", "add", "submit"}

    last = await solve_counter(client, created["session_id"])
    assert last["done"] is True
    assert last["reward"] == 1.0
    assert last["info"]["done_reason"] == "submitted"

    verified = (await client.post(f"/v1/sessions/{created['session_id']}/verify")).json()
    assert verified["reward"] == 1.0
    assert verified["components"] == {"reached": 1.0, "submitted": 1.0}

    assert (await client.delete(f"/v1/sessions/{created['session_id']}")).status_code == 204
    assert (await client.delete(f"/v1/sessions/{created['session_id']}")).status_code == 204

    stored = await wait_for_rollout(client, created["session_id"], "completed")
    assert stored["run"] == "run-a"
    assert stored["reward"] == 1.0
    assert stored["env_version"] == created["env_version"]
    assert stored["verifier_version"]
    assert stored["policy"] == {"model": "hand", "temperature": 0}
    assert stored["num_turns"] == len(stored["timings"]["step_ms"])
    assert stored["finished_at"] is not None
    roles = [message["role"] for message in stored["messages"]]
    assert roles[:2] == ["system", "user"] and roles[-1] == "tool"

    # GET on a closed session falls back to the store.
    state = (await client.get(f"/v1/sessions/{created['session_id']}")).json()
    assert state["status"] == "completed" and state["reward"] == 1.0


async def test_same_task_and_seed_start_the_same(gym: AppHarness) -> None:
    values = []
    for seed in (3, 3, 4):
        session = await open_counter(gym.client, seed=seed)
        reply = (await step(gym.client, session["session_id"], call("read"))).json()
        values.append(reply["messages"][0]["content"])
    assert values[0] == values[1]
    first = await open_counter(gym.client, seed=3)
    second = await open_counter(gym.client, seed=3)
    assert first["messages"] == second["messages"]


async def test_abandoned_session_is_stored_with_its_transcript(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    await step(gym.client, session["session_id"], call("add", {"amount": 3}))
    await gym.client.delete(f"/v1/sessions/{session['session_id']}")
    stored = await wait_for_rollout(gym.client, session["session_id"], "abandoned")
    assert stored["num_turns"] == 1
    assert stored["messages"][-1]["role"] == "tool"


async def test_verify_any_time_and_turn_data_is_kept(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    sid = session["session_id"]
    early = (await gym.client.post(f"/v1/sessions/{sid}/verify")).json()
    assert early["reward"] == 0.0
    tokens = {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5], "logprobs": [-0.1, -0.2]}
    response = await gym.client.post(
        f"/v1/sessions/{sid}/step", json={"message": call("submit"), "turn_data": tokens}
    )
    assert response.json()["done"] is True
    await gym.client.delete(f"/v1/sessions/{sid}")
    stored = await wait_for_rollout(gym.client, sid, "completed")
    assert stored["turns"] == [tokens]


async def test_max_turns_budget_ends_the_episode_with_a_failure_class(
    app_factory: Callable[..., Any],
) -> None:
    async with app_factory(limits={"max_turns": 3}) as gym:
        session = await open_counter(gym.client)
        sid = session["session_id"]
        replies = [(await step(gym.client, sid, call("read"))).json() for _ in range(3)]
        assert [reply["done"] for reply in replies] == [False, False, True]
        assert replies[-1]["info"]["failure"] == "max_turns"
        assert replies[-1]["reward"] == 0.0
        after = await step(gym.client, sid, call("read"))
        assert after.status_code == 409
        await gym.client.delete(f"/v1/sessions/{sid}")
        stored = await wait_for_rollout(gym.client, sid, "failed")
        assert stored["failure"] == "max_turns"


async def test_transcript_budget_ends_the_episode(app_factory: Callable[..., Any]) -> None:
    async with app_factory(limits={"max_transcript_bytes": 4096}) as gym:
        session = await open_counter(gym.client)
        padded = call("add", {"amount": 1, "note": "x" * 5000})
        reply = (await step(gym.client, session["session_id"], padded)).json()
        assert reply["done"] is True
        assert reply["info"]["failure"] == "max_transcript_bytes"


async def test_turn_data_counts_towards_the_transcript_budget(app_factory: Callable[..., Any]) -> None:
    """Token data is held with the session until close, so a client cannot park it outside the budget."""
    async with app_factory(limits={"max_transcript_bytes": 4096}) as gym:
        sid = (await open_counter(gym.client))["session_id"]
        tokens = {"completion_ids": list(range(2000)), "logprobs": [-0.5] * 2000}
        response = await gym.client.post(
            f"/v1/sessions/{sid}/step", json={"message": call("read"), "turn_data": tokens}
        )
        assert response.json()["done"] is True
        assert response.json()["info"]["failure"] == "max_transcript_bytes"
        await gym.client.delete(f"/v1/sessions/{sid}")
        stored = await wait_for_rollout(gym.client, sid, "failed")
        assert stored["turns"] == [tokens]  # kept whole: the budget ends the episode, it loses nothing


async def test_steps_on_one_session_are_serialized(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    sid = session["session_id"]
    responses = await asyncio.gather(*(step(gym.client, sid, call("add", {"amount": 1})) for _ in range(20)))
    values = sorted(int(r.json()["messages"][0]["content"]) for r in responses)
    assert values == list(range(values[0], values[0] + 20))


async def test_expired_session_answers_410_and_is_stored_expired(app_factory: Callable[..., Any]) -> None:
    async with app_factory(sessions={"reap_interval_s": 3600}) as gym:
        session = await open_counter(gym.client, ttl_s=0.05)
        await asyncio.sleep(0.1)
        response = await step(gym.client, session["session_id"], call("read"))
        assert response.status_code == 410
        assert response.headers["content-type"] == "application/problem+json"
        assert "expired" in response.json()["detail"]
        stored = await wait_for_rollout(gym.client, session["session_id"], "expired")
        assert stored["failure"] == "expired"
        assert (await gym.client.delete(f"/v1/sessions/{session['session_id']}")).status_code == 204


async def test_reaper_closes_idle_sessions(app_factory: Callable[..., Any]) -> None:
    async with app_factory(sessions={"reap_interval_s": 0.02}) as gym:
        session = await open_counter(gym.client, ttl_s=0.05)
        stored = await wait_for_rollout(gym.client, session["session_id"], "expired")
        assert stored["status"] == "expired"
        assert gym.app.state.manager.live_count == 0


async def test_tombstones_end_oldest_first_and_younger_ones_stay(app_factory: Callable[..., Any]) -> None:
    """A closed id answers 410 for `tombstone_s`, then 404; the reaper ends them in the order they went."""
    async with app_factory(sessions={"reap_interval_s": 3600, "tombstone_s": 100}) as gym:
        manager = gym.app.state.manager
        now = [1000.0]
        manager._clock = lambda: now[0]
        closed = []
        for at in (0.0, 50.0, 120.0, 130.0):
            now[0] = 1000.0 + at
            session_id = (await open_counter(gym.client))["session_id"]
            assert (await gym.client.delete(f"/v1/sessions/{session_id}")).status_code == 204
            closed.append(session_id)
        now[0] = 1000.0 + 160.0  # the first two went more than 100 s ago
        await manager.reap_expired()
        answers = [(await step(gym.client, sid, call("read"))).status_code for sid in closed]
        assert answers == [404, 404, 410, 410]


async def test_ttl_above_the_server_maximum_is_refused(app_factory: Callable[..., Any]) -> None:
    async with app_factory(sessions={"max_ttl_s": 60, "default_ttl_s": 30}) as gym:
        response = await gym.client.post(
            "/v1/sessions", json={"env": "counter", "task_id": "counter-0000", "ttl_s": 61}
        )
        assert response.status_code == 422
        assert "maximum of 60" in response.json()["detail"]


async def test_capacity_answers_429_with_retry_after_then_recovers(app_factory: Callable[..., Any]) -> None:
    async with app_factory(sessions={"max_sessions": 2, "retry_after_s": 3}) as gym:
        first = await open_counter(gym.client)
        await open_counter(gym.client)
        refused = await gym.client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0000"})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "3"
        assert refused.json()["title"] == "At capacity"
        await gym.client.delete(f"/v1/sessions/{first['session_id']}")
        await open_counter(gym.client)
        metrics = (await gym.client.get("/metrics")).text
        assert "gym_sessions_rejected_total 1.0" in metrics


async def test_inline_task(gym: AppHarness) -> None:
    task = {"id": "adhoc-1", "prompt": "Bring the counter to 5, then submit.", "answer": 5}
    response = await gym.client.post("/v1/sessions", json={"env": "counter", "task": task, "seed": 1})
    assert response.status_code == 201
    assert response.json()["task_id"] == "adhoc-1"


async def test_shutdown_records_live_sessions_as_lost(app_factory: Callable[..., Any]) -> None:
    async with app_factory() as gym:
        session = await open_counter(gym.client)
        await step(gym.client, session["session_id"], call("read"))
    async with app_factory() as gym:
        stored = await wait_for_rollout(gym.client, session["session_id"], "lost")
        assert stored["failure"] == "server_shutdown"
        assert stored["num_turns"] == 1


async def test_a_non_finite_score_is_no_signal_not_a_crash(gym: AppHarness) -> None:
    from gym_env_counter.env import CounterEnv
    from gym_server import VerifyResult

    class NanCounter(CounterEnv):
        async def verify(self) -> VerifyResult:
            return VerifyResult(reward=float("nan"))

    entry = gym.app.state.registry.get("counter")
    original = entry.cls
    object.__setattr__(entry, "cls", NanCounter)
    try:
        session = await open_counter(gym.client)
        verified = (await gym.client.post(f"/v1/sessions/{session['session_id']}/verify")).json()
    finally:
        object.__setattr__(entry, "cls", original)
    assert verified["reward"] == 0.0
    assert verified["failure"] == "verify_error"
    assert verified["info"] == {"error": "non-finite score"}


async def test_a_hung_tool_ends_the_episode_as_an_environment_error(app_factory: Callable[..., Any]) -> None:
    from gym_env_counter.env import CounterEnv
    from gym_server import Registry, VerifyResult, tool

    class HangingCounter(CounterEnv):
        name = "hanging_counter"
        dataset_name = "counter"

        @tool
        async def hang(self) -> str:
            """Never returns."""
            await asyncio.sleep(3600)
            return "unreachable"

        async def verify(self) -> VerifyResult:
            return await super().verify()

    async with app_factory(Registry([HangingCounter]), limits={"tool_timeout_s": 0.05}) as gym:
        created = await gym.client.post(
            "/v1/sessions", json={"env": "hanging_counter", "task_id": "counter-0000"}
        )
        sid = created.json()["session_id"]
        reply = (await step(gym.client, sid, call("hang"))).json()
        assert reply["done"] is True
        assert reply["info"]["failure"] == "env_error"
        assert (await step(gym.client, sid, call("read"))).status_code == 409
        await gym.client.delete(f"/v1/sessions/{sid}")
        stored = await wait_for_rollout(gym.client, sid, "failed")
        assert stored["failure"] == "env_error"


async def test_a_client_can_close_with_a_policy_failure(gym: AppHarness) -> None:
    session = await open_counter(gym.client)
    sid = session["session_id"]
    assert (await gym.client.delete(f"/v1/sessions/{sid}?failure=policy_timeout")).status_code == 204
    stored = await wait_for_rollout(gym.client, sid, "failed")
    assert stored["failure"] == "policy_timeout"
    bad = await gym.client.delete(f"/v1/sessions/{sid}?failure=whatever")
    assert bad.status_code == 422


async def test_a_create_that_fails_after_reset_closes_the_environment(
    app_factory: Callable[..., Any],
) -> None:
    # Whatever fails between an environment's reset and the 201 (here its tool schemas), the environment
    # that reset started is closed at once, the live count and the capacity come back, and no row is live.
    from gym_env_counter.env import CounterEnv
    from gym_server import Registry

    closed: list[str] = []

    class BrokenToolsCounter(CounterEnv):
        name = "broken_tools_counter"
        dataset_name = "counter"

        def tools(self) -> list[dict[str, Any]]:
            raise RuntimeError("tool schemas cannot be built")

        async def close(self) -> None:
            closed.append(self.task.id)
            await super().close()

    async with app_factory(Registry([BrokenToolsCounter]), sessions={"max_sessions": 1}) as gym:
        # The app's own 500 answer, as a server sends it (the test transport would re-raise by default).
        transport = httpx.ASGITransport(app=gym.app, raise_app_exceptions=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://localhost")
        for _ in range(3):  # at capacity 1, a leaked create would make the next one 429
            created = await client.post(
                "/v1/sessions", json={"env": "broken_tools_counter", "task_id": "counter-0000"}
            )
            assert created.status_code == 500, created.text
            assert created.headers["content-type"].startswith("application/problem+json")
        assert closed == ["counter-0000"] * 3
        assert gym.app.state.manager.live_count == 0
        listed = await gym.client.get("/v1/rollouts", params={"env": "broken_tools_counter"})
        assert listed.json()["items"] == []
        await client.aclose()
