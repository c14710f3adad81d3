"""Forks of forks, of inline tasks, and a fork request cancelled half-way (on SQLite and PostgreSQL); and
the pure parts of `sessions.fork`: splitting a transcript into turns, the shared prefix, the first
difference between a recording and a replay."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from conftest import AppHarness
from gymtest import call, step, wait_for_rollout

from gym_env_counter.env import CounterEnv
from gym_server.sdk.environment import ForkMode
from gym_server.sdk.registry import Registry
from gym_server.sdk.tools import tool
from gym_server.sessions.fork import first_difference, prefix_length, source_from_live, split_turns

TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "r1"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}, {"id": "d"}]},
    {"role": "tool", "content": "t1"},
    {"role": "tool", "content": "t2"},
    {"role": "assistant", "content": "a3"},
]


def test_a_transcript_splits_into_its_opening_and_turns() -> None:
    opening, turns = split_turns(TRANSCRIPT)
    assert opening == TRANSCRIPT[:2]
    assert [turn.assistant for turn in turns] == [TRANSCRIPT[2], TRANSCRIPT[4], TRANSCRIPT[7]]
    assert [len(turn.replies) for turn in turns] == [1, 2, 0]
    assert [prefix_length(TRANSCRIPT, turn) for turn in range(4)] == [2, 4, 7, 8]


def test_the_first_difference_is_named_by_its_path() -> None:
    assert first_difference(TRANSCRIPT, [dict(m) for m in TRANSCRIPT]) is None
    changed = [dict(m) for m in TRANSCRIPT]
    changed[5] = {"role": "tool", "content": "other"}
    assert first_difference(TRANSCRIPT, changed) == ("[5].content", "t1", "other")
    assert first_difference([1, 2], [1, 2, 3]) == (" (length)", 2, 3)
    assert first_difference({"a": 1}, {"a": 1, "b": 2}) == (".b", None, 2)
    assert first_difference(1, 1.0) == ("(the value)", 1, 1.0)  # JSON 1 and 1.0 are different answers


async def test_a_fork_of_a_fork_replays_the_whole_chain(gym: AppHarness) -> None:
    client = gym.client
    created = await client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0000", "seed": 0})
    root = created.json()["session_id"]
    await step(client, root, call("add", {"amount": 1}))
    child = (await client.post(f"/v1/sessions/{root}/fork", json={"turn": 1})).json()["forks"][0]
    await step(client, child["session_id"], call("add", {"amount": 2}))
    state = (await client.get(f"/v1/sessions/{child['session_id']}")).json()
    for session_id in (root, child["session_id"]):
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
    await wait_for_rollout(client, child["session_id"], "abandoned")
    grandchild = await client.post(f"/v1/sessions/{child['session_id']}/fork", json={"turn": 2})
    assert grandchild.status_code == 201, grandchild.text
    (item,) = grandchild.json()["forks"]
    assert item["messages"] == state["messages"] and item["parent_id"] == child["session_id"]
    reply = (await step(client, item["session_id"], call("read"))).json()
    assert reply["messages"][0]["content"] == state["messages"][-1]["content"]  # start + 1 + 2
    # The fork's own record holds only its own turn data: the prefix's is the parent's.
    turn_data = {"completion_ids": [1, 2]}
    sent = {"message": call("add", {"amount": 1}), "turn_data": turn_data}
    assert (await client.post(f"/v1/sessions/{item['session_id']}/step", json=sent)).status_code == 200
    assert (await client.delete(f"/v1/sessions/{item['session_id']}")).status_code == 204
    stored = await wait_for_rollout(client, item["session_id"], "abandoned")
    assert stored["turns"] == [turn_data] and stored["num_turns"] == 4


async def test_an_inline_task_episode_forks_from_the_store(gym: AppHarness) -> None:
    client = gym.client
    task = {"id": "my-counter", "prompt": "Bring the counter to 7, then submit.", "answer": 7}
    created = await client.post("/v1/sessions", json={"env": "counter", "task": task, "seed": 5})
    session_id = created.json()["session_id"]
    start = int((await step(client, session_id, call("read"))).json()["messages"][0]["content"])
    assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
    await wait_for_rollout(client, session_id, "abandoned")
    forked = await client.post(f"/v1/sessions/{session_id}/fork", json={"turn": 1})
    assert forked.status_code == 201, forked.text
    fork_id = forked.json()["forks"][0]["session_id"]
    value = start
    while value != 7:  # the fork plays on from the stored state, towards the inline task's target
        amount = max(-10, min(10, 7 - value))
        value = int(
            (await step(client, fork_id, call("add", {"amount": amount}))).json()["messages"][0]["content"]
        )
    done = (await step(client, fork_id, call("submit"))).json()
    assert done["reward"] == 1.0  # scored on the inline task (target 7), not a dataset task
    assert (await client.delete(f"/v1/sessions/{fork_id}")).status_code == 204
    stored = await wait_for_rollout(client, fork_id, "completed")
    assert stored["metadata"]["inline_task"]["answer"] == 7 and stored["task_id"] == "my-counter"


class SlowCounter(CounterEnv):
    """A counter whose `wait` tool takes a while (so a replay can be cancelled during it), counting its
    open instances."""

    name = "slow_counter"
    dataset_name = "counter"
    fork_mode = ForkMode.REPLAY  # each fork a replay of its own, to be cancelled mid-way
    open_instances: ClassVar[int] = 0
    # set once `expected` calls are inside `wait` at the same time
    inside: ClassVar[int] = 0
    expected: ClassVar[int] = 0
    all_inside: ClassVar[asyncio.Event | None] = None

    async def setup(self) -> None:
        await super().setup()
        SlowCounter.open_instances += 1

    @tool
    async def wait(self) -> str:
        """Wait a moment."""
        SlowCounter.inside += 1
        if SlowCounter.all_inside is not None and SlowCounter.inside >= SlowCounter.expected:
            SlowCounter.all_inside.set()
        try:
            await asyncio.sleep(0.3)
        finally:
            SlowCounter.inside -= 1
        return "waited"

    async def close(self) -> None:
        SlowCounter.open_instances -= 1


async def test_a_cancelled_fork_leaves_nothing_running(app_factory: Callable[..., Any]) -> None:
    async with app_factory(Registry([SlowCounter]), sessions={"max_sessions": 4}) as gym:
        client, manager = gym.client, gym.app.state.manager
        created = await client.post("/v1/sessions", json={"env": "slow_counter", "task_id": "counter-0000"})
        parent = created.json()["session_id"]
        await step(client, parent, call("wait"))
        source = await source_from_live(manager.get(parent))
        SlowCounter.expected, SlowCounter.all_inside = 3, asyncio.Event()
        forking = asyncio.create_task(manager.fork(source, 1, 3))
        await SlowCounter.all_inside.wait()  # three replays started, each inside its `wait`
        assert SlowCounter.open_instances == 4
        forking.cancel()
        await asyncio.gather(forking, return_exceptions=True)
        assert forking.cancelled()
        assert SlowCounter.open_instances == 1 and manager.live_count == 1
        # The places it held are free again: three forks fit where the capacity allows exactly that.
        forked = await client.post(f"/v1/sessions/{parent}/fork", json={"turn": 1, "n": 3})
        assert forked.status_code == 201, forked.text
        assert SlowCounter.open_instances == 4 and manager.live_count == 4
