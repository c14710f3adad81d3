"""Forking an episode at a turn over HTTP (`POST /v1/sessions/{id}/fork`, docs/fork.md), on SQLite and
PostgreSQL: forks of live and stored counter episodes start in the original's state with its messages,
are independent of it and of each other, are stored with their lineage and count against capacity; a
copy-mode environment is copied; every bad input is a clear 4xx with nothing left running."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, ClassVar

import httpx
from conftest import AppHarness
from gymtest import assert_problem, call, step, wait_for_rollout

from gym_env_counter.env import CounterEnv
from gym_server.sdk.environment import ForkMode
from gym_server.sdk.registry import Registry
from gym_server.sdk.tools import tool


class FrozenCounter(CounterEnv):
    """A counter that says it cannot be forked."""

    name = "frozen_counter"
    dataset_name = "counter"
    fork_mode = ForkMode.NONE


class DiceCounter(CounterEnv):
    """A counter with a tool whose answer is not a function of task and seed; it counts open instances,
    so a test sees that a refused fork leaves none of its own running."""

    name = "dice_counter"
    dataset_name = "counter"
    fork_mode = ForkMode.REPLAY
    open_instances: ClassVar[int] = 0

    async def setup(self) -> None:
        await super().setup()
        DiceCounter.open_instances += 1

    @tool
    async def roll(self) -> int:
        """Roll a die nobody seeded."""
        return random.SystemRandom().randint(1, 1_000_000)

    async def close(self) -> None:
        DiceCounter.open_instances -= 1


async def fork(client: httpx.AsyncClient, session_id: str, **body: Any) -> httpx.Response:
    return await client.post(f"/v1/sessions/{session_id}/fork", json=body)


async def played(client: httpx.AsyncClient, env: str = "counter", *messages: dict[str, Any]) -> str:
    """A session of counter-0000 (seed 0) stepped through `messages`; its id."""
    created = await client.post("/v1/sessions", json={"env": env, "task_id": "counter-0000", "seed": 0})
    assert created.status_code == 201, created.text
    session_id = str(created.json()["session_id"])
    for message in messages:
        assert (await step(client, session_id, message)).status_code == 200
    return session_id


async def read(client: httpx.AsyncClient, session_id: str) -> int:
    reply = (await step(client, session_id, call("read"))).json()
    return int(reply["messages"][0]["content"])


async def test_forks_of_a_live_episode_start_in_its_state_and_go_their_own_ways(gym: AppHarness) -> None:
    client = gym.client
    parent = await played(client, "counter", call("read"), call("add", {"amount": 3}))
    state = (await client.get(f"/v1/sessions/{parent}")).json()
    response = await fork(client, parent, turn=2, n=3, run="tree")
    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["parent_id"] == parent and answer["turn"] == 2 and answer["fork_mode"] == "copy"
    forks = answer["forks"]
    assert len(forks) == 3 and len({item["session_id"] for item in forks}) == 3
    for item in forks:
        assert item["messages"] == state["messages"]
        assert item["parent_id"] == parent and item["parent_turn"] == 2
        assert item["tools"] == state["tools"] and item["env_version"] == state["env_version"]
    value = await read(client, parent)
    # Independent: each fork moves its own counter; the parent's stays where it was.
    for amount, item in zip((1, 2, 3), forks, strict=True):
        reply = (await step(client, item["session_id"], call("add", {"amount": amount}))).json()
        assert reply["messages"][0]["content"] == str(value + amount)
    assert await read(client, parent) == value
    # A fork's turns go on from the parent's (its budget counts them too).
    fork_state = (await client.get(f"/v1/sessions/{forks[0]['session_id']}")).json()
    assert fork_state["turns"] == 3 and fork_state["parent_id"] == parent and fork_state["parent_turn"] == 2
    assert (await client.delete(f"/v1/sessions/{forks[0]['session_id']}")).status_code == 204
    stored = await wait_for_rollout(client, forks[0]["session_id"], "abandoned")
    assert (stored["parent_id"], stored["parent_turn"], stored["run"]) == (parent, 2, "tree")
    listed = (await client.get("/v1/rollouts", params={"parent_id": parent})).json()
    assert {item["id"] for item in listed["items"]} == {item["session_id"] for item in forks}


async def test_a_stored_episode_forks_at_an_earlier_turn_and_the_fork_can_finish(gym: AppHarness) -> None:
    client = gym.client
    parent = await played(
        client, "counter", call("read"), call("add", {"amount": 1}), call("add", {"amount": 1})
    )
    assert (await client.delete(f"/v1/sessions/{parent}")).status_code == 204
    stored = await wait_for_rollout(client, parent, "abandoned")
    response = await fork(client, parent, turn=1)
    assert response.status_code == 201, response.text
    (item,) = response.json()["forks"]
    # The opening messages, the first assistant turn and its reply: nothing after turn 1.
    assert item["messages"] == stored["messages"][:4]
    start = int(stored["messages"][3]["content"])
    target = int(item["messages"][1]["content"].split()[4].rstrip(","))
    amount = target - start
    assert -10 <= amount <= 10  # counter-0000 with seed 0 is one add away
    reply = (await step(client, item["session_id"], call("add", {"amount": amount}))).json()
    assert reply["messages"][0]["content"] == str(target)
    done = (await step(client, item["session_id"], call("submit"))).json()
    assert done["done"] is True and done["reward"] == 1.0


async def test_a_copy_mode_environment_is_copied(gym: AppHarness) -> None:
    """The counter declares `copy`: forks at the live episode's turn are copies of it, at an earlier turn
    copies of one replay; either way they share no state."""
    client = gym.client
    parent = await played(client, "counter", call("add", {"amount": 4}), call("add", {"amount": -1}))
    value = await read(client, parent)
    for turn in (3, 1):  # the current turn (copied from the live session) and an earlier one (replayed)
        response = await fork(client, parent, turn=turn, n=2)
        assert response.status_code == 201, response.text
        assert response.json()["fork_mode"] == "copy"
        first, second = (item["session_id"] for item in response.json()["forks"])
        expected = value if turn == 3 else value + 1
        assert await read(client, first) == expected
        await step(client, first, call("add", {"amount": 5}))
        assert await read(client, second) == expected  # copies share nothing
    assert await read(client, parent) == value


async def test_bad_forks_are_4xx_and_leave_nothing_running(app_factory: Callable[..., Any]) -> None:
    registry = Registry([CounterEnv, FrozenCounter])
    async with app_factory(registry, sessions={"max_forks": 2, "max_sessions": 3}) as gym:
        client = gym.client
        parent = await played(client, "counter", call("read"))
        live = gym.app.state.manager.live_count
        assert_problem(await fork(client, parent, turn=2), 422, "turn 2 is beyond episode")
        assert_problem(await fork(client, parent, turn=0, n=3), 422, "opens 1..2 sessions")
        assert_problem(await fork(client, parent, turn=0, n=0), 422, "n")
        assert_problem(await fork(client, parent, turn=-1), 422, "turn")
        assert_problem(await fork(client, "f" * 32, turn=0), 404, "session")
        # Capacity: both forks must fit, or neither opens (3 sessions at most, 2 held).
        other = await played(client, "counter")
        assert_problem(await fork(client, parent, turn=0, n=2), 429, "maximum of 3 live sessions")
        assert gym.app.state.manager.live_count == live + 1
        assert (await client.delete(f"/v1/sessions/{other}")).status_code == 204
        # A turn that ended the episode cannot be continued.
        finished = await played(client, "counter")
        await step(client, finished, call("submit"))
        assert_problem(await fork(client, finished, turn=1), 422, "ended episode")
        assert gym.app.state.manager.live_count == live + 1
        frozen = await played(client, "frozen_counter")
        assert_problem(await fork(client, frozen, turn=0), 409, "does not fork")
        assert gym.app.state.manager.live_count == live + 2


async def test_a_stored_episode_of_another_version_is_refused(gym: AppHarness) -> None:
    client = gym.client
    parent = await played(client, "counter", call("read"))
    assert (await client.delete(f"/v1/sessions/{parent}")).status_code == 204
    record = await gym.app.state.store.get(parent)
    store = gym.app.state.store
    store.record(record.model_copy(update={"id": "old-version", "env_version": "0123456789ab"}))
    await store.committed("old-version")
    problem = assert_problem(await fork(client, "old-version", turn=1), 409, "version 0123456789ab")
    assert problem["type"].endswith("fork-unavailable")
    assert gym.app.state.manager.live_count == 0


async def test_a_non_deterministic_episode_is_refused_naming_the_divergence(
    app_factory: Callable[..., Any],
) -> None:
    async with app_factory(Registry([DiceCounter])) as gym:
        client = gym.client
        parent = await played(client, "dice_counter", call("read"), call("roll"), call("read"))
        before = DiceCounter.open_instances
        problem = assert_problem(await fork(client, parent, turn=3, n=2), 409, "diverged at turn 2")
        assert problem["type"].endswith("fork-diverged")
        assert problem["turn"] == 2 and problem["where"] == "the replies[0].content"
        assert DiceCounter.open_instances == before == 1  # the replays went back; the parent is open
        assert gym.app.state.manager.live_count == 1
        # Before the roll the episode is still deterministic: forking there works.
        assert (await fork(client, parent, turn=1)).status_code == 201
