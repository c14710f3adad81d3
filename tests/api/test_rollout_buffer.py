"""The rollout buffer over HTTP (`/v1/policy-runs/...`), on SQLite and PostgreSQL: versions announced and
recorded, groups admitted under the bound, handed out once with an acknowledgement, too stale groups kept
and never handed out, and the bad input a trainer or producer can send refused with a problem+json."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from conftest import AppHarness
from gymtest import assert_problem, call, open_counter

# Each test's own run (PostgreSQL's database is shared by the whole suite); set by the autouse fixture.
RUN = ""


@pytest.fixture(autouse=True)
def _run_name() -> None:
    global RUN
    RUN = f"buffer-{uuid.uuid4().hex[:8]}"


async def announce(client: httpx.AsyncClient, version: int, **shape: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/policy-runs/{RUN}/versions", json={"version": version, **shape})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def admit(client: httpx.AsyncClient, size: int = 2) -> httpx.Response:
    return await client.post(f"/v1/policy-runs/{RUN}/groups", json={"size": size, "env": "counter"})


async def play(
    client: httpx.AsyncClient, group: dict[str, Any], versions: list[int | None] | None = None
) -> str:
    """One counter episode of `group`, closed (acknowledged: committed); each turn's `turn_data` says the
    policy version that sampled it when `versions` gives them."""
    session = await open_counter(
        client,
        run=RUN,
        metadata=group["metadata"],
        policy={"model": "tiny", "weight_version": group["version"]},
    )
    sid = session["session_id"]
    for version in versions or [None]:
        turn_data = {} if version is None else {"weight_version": version}
        response = await client.post(
            f"/v1/sessions/{sid}/step", json={"message": call("read"), "turn_data": turn_data}
        )
        assert response.status_code == 200, response.text
    assert (await client.post(f"/v1/sessions/{sid}/verify")).status_code == 200
    closed = await client.delete(f"/v1/sessions/{sid}")
    assert closed.status_code == 204
    return str(sid)


async def play_group(client: httpx.AsyncClient, size: int = 2) -> tuple[dict[str, Any], list[str]]:
    admitted = await admit(client, size)
    assert admitted.status_code == 201, admitted.text
    group = admitted.json()
    return group, [await play(client, group) for _ in range(size)]


async def pull(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/policy-runs/{RUN}/pull", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_announcements_make_the_run_and_never_go_backwards(gym: AppHarness) -> None:
    client = gym.client
    first = await announce(client, 3, policy="tiny", max_staleness=1, groups_per_step=2)
    assert (first["version"], first["first_version"], first["max_staleness"]) == (3, 3, 1)
    assert first["admit_limit"] == 4  # (3 - 3 + 1 + 1) * 2
    assert (await announce(client, 3))["version"] == 3  # a repeat is harmless
    later = await announce(client, 5)
    assert (later["version"], later["max_staleness"], later["groups_per_step"]) == (5, 1, 2)  # shape kept
    assert later["admit_limit"] == 8
    body = assert_problem(
        await client.post(f"/v1/policy-runs/{RUN}/versions", json={"version": 4}), 409, "backwards"
    )
    assert body["type"].endswith("version-backwards") and body["current"] == 5
    got = await client.get(f"/v1/policy-runs/{RUN}")
    assert got.status_code == 200 and got.json()["version"] == 5


async def test_bad_input_is_a_problem(gym: AppHarness) -> None:
    client = gym.client
    for body in ({"version": 1, "max_staleness": -1}, {"version": -1}, {"version": 1, "groups_per_step": 0}):
        assert_problem(await client.post(f"/v1/policy-runs/{RUN}/versions", json=body), 422, "")
    assert_problem(await client.get(f"/v1/policy-runs/{RUN}"), 404, f"no policy run {RUN!r}")
    assert_problem(await client.post(f"/v1/policy-runs/{RUN}/pull", json={}), 404, "announce")
    assert_problem(await client.post(f"/v1/policy-runs/{RUN}/groups", json={"size": 2}), 404, "announce")
    await announce(client, 0)
    assert_problem(
        await client.post(f"/v1/policy-runs/{RUN}/acks", json={"lease_id": "ab12"}), 404, "no lease"
    )
    assert_problem(
        await client.post(f"/v1/policy-runs/{RUN}/pull", json={"max_groups": 1, "min_groups": 2}), 422, ""
    )
    assert_problem(await client.post(f"/v1/policy-runs/{RUN}/pull", json={"lease_s": 0}), 422, "")


async def test_a_group_is_handed_out_once_when_complete_and_consumed_by_its_acknowledgement(
    gym: AppHarness,
) -> None:
    client = gym.client
    await announce(client, 0)
    admitted = (await admit(client, size=2)).json()
    assert admitted["version"] == 0 and admitted["metadata"] == {"buffer_group": admitted["group_id"]}
    first = await play(client, admitted)
    assert (await pull(client))["groups"] == []  # one of two episodes finished: not ready
    second = await play(client, admitted)
    handout = await pull(client, max_groups=4)
    [group] = handout["groups"]
    assert group["group_id"] == admitted["group_id"] and group["deliveries"] == 1
    assert sorted(episode["id"] for episode in group["episodes"]) == sorted([first, second])
    assert all(episode["reward"] is not None for episode in group["episodes"])
    assert (await pull(client))["groups"] == []  # leased: no other pull gets it
    ack = await client.post(f"/v1/policy-runs/{RUN}/acks", json={"lease_id": handout["lease_id"]})
    assert ack.status_code == 200 and ack.json() == {
        "lease_id": handout["lease_id"],
        "consumed": 1,
        "handed_out": 1,
    }
    again = await client.post(f"/v1/policy-runs/{RUN}/acks", json={"lease_id": handout["lease_id"]})
    assert again.status_code == 200 and again.json()["consumed"] == 1  # idempotent
    state = (await client.get(f"/v1/policy-runs/{RUN}")).json()
    assert state["groups"]["consumed"] == 1


async def test_an_unacknowledged_lease_expires_and_its_groups_are_handed_out_again(gym: AppHarness) -> None:
    client = gym.client
    await announce(client, 0)
    group, _ = await play_group(client)
    lost = await pull(client, lease_s=0.05)  # a trainer killed before it acknowledged
    await asyncio.sleep(0.1)
    retried = await pull(client)
    assert [g["group_id"] for g in retried["groups"]] == [group["group_id"]]
    assert retried["groups"][0]["deliveries"] == 2 and retried["lease_id"] != lost["lease_id"]
    assert_problem(
        await client.post(f"/v1/policy-runs/{RUN}/acks", json={"lease_id": lost["lease_id"]}), 409, "expired"
    )
    ack = await client.post(f"/v1/policy-runs/{RUN}/acks", json={"lease_id": retried["lease_id"]})
    assert ack.json()["consumed"] == 1


async def test_producers_are_throttled_by_the_bound(gym: AppHarness) -> None:
    client = gym.client
    await announce(client, 0, max_staleness=1, groups_per_step=1)  # two groups may run ahead
    assert (await admit(client)).status_code == 201
    assert (await admit(client)).status_code == 201
    full = await admit(client)
    body = assert_problem(full, 429, "retry in 1 s")
    assert full.headers["retry-after"] == "1" and body["type"].endswith("buffer-full")
    await announce(client, 1)  # the trainer took a step: one more group
    assert (await admit(client)).status_code == 201
    assert (await admit(client)).status_code == 429


async def test_too_stale_groups_are_kept_marked_and_never_handed_out(gym: AppHarness) -> None:
    client = gym.client
    await announce(client, 0, max_staleness=1, groups_per_step=1)
    await play_group(client)  # played under version 0
    await announce(client, 1)
    fresh, _ = await play_group(client)
    await announce(client, 2)  # the group of version 0 is now 2 behind
    handout = await pull(client, max_groups=4)
    assert [g["group_id"] for g in handout["groups"]] == [fresh["group_id"]]
    state = (await client.get(f"/v1/policy-runs/{RUN}")).json()
    assert state["groups"]["stale"] == 1 and state["groups"]["leased"] == 1
    # stale groups no longer count against the producers' allowance: (2 - 0 + 1 + 1) * 1 = 4 admitted
    assert state["admit_limit"] == 4


async def test_a_group_is_as_old_as_its_oldest_call(gym: AppHarness) -> None:
    """A partial rollout: the weights changed mid-episode; the episode records both versions, and the
    group's staleness is its oldest call's."""
    client = gym.client
    await announce(client, 0, max_staleness=1)
    group = (await admit(client, size=1)).json()
    sid = await play(client, group, versions=[0, 1])
    stored = (await client.get(f"/v1/rollouts/{sid}")).json()
    assert (stored["version_min"], stored["version_max"]) == (0, 1)
    await announce(client, 2)
    assert (await pull(client))["groups"] == []  # its oldest call is 2 behind
    assert (await client.get(f"/v1/policy-runs/{RUN}")).json()["groups"]["stale"] == 1


async def test_a_pull_waits_for_a_whole_batch(gym: AppHarness) -> None:
    client = gym.client
    await announce(client, 0)
    first, _ = await play_group(client)
    waiting = asyncio.create_task(pull(client, max_groups=2, min_groups=2, wait_s=10))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # one group ready, two wanted: nothing leased yet
    second, _ = await play_group(client)
    handout = await waiting
    assert [g["group_id"] for g in handout["groups"]] == [first["group_id"], second["group_id"]]


async def test_concurrent_pulls_never_share_a_group(gym: AppHarness) -> None:
    client = gym.client
    await announce(client, 0)
    groups = [(await play_group(client, size=1))[0]["group_id"] for _ in range(4)]
    handouts = await asyncio.gather(*(pull(client, max_groups=2) for _ in range(4)))
    handed = [g["group_id"] for handout in handouts for g in handout["groups"]]
    assert sorted(handed) == sorted(groups)  # each once


async def test_a_pull_that_waited_in_vain_leases_nothing(gym: AppHarness) -> None:
    client = gym.client
    await announce(client, 0)
    await play_group(client)
    handout = await pull(client, max_groups=2, min_groups=2, wait_s=0.3)
    assert handout["groups"] == [] and handout["lease_id"] is None
    assert len((await pull(client))["groups"]) == 1  # the ready group was not held


async def test_a_group_id_that_is_not_a_name_is_refused_at_create(gym: AppHarness) -> None:
    for group in (7, "x" * 256, "a\x01b"):
        response = await gym.client.post(
            "/v1/sessions",
            json={"env": "counter", "task_id": "counter-0000", "metadata": {"buffer_group": group}},
        )
        assert_problem(response, 422, "buffer_group")


async def test_an_admission_waits_for_the_step_that_makes_room(gym: AppHarness) -> None:
    client = gym.client
    await announce(client, 0, max_staleness=1, groups_per_step=1)  # two groups at version 0
    assert [(await admit(client)).status_code for _ in range(2)] == [201, 201]
    waiting = asyncio.create_task(
        client.post(f"/v1/policy-runs/{RUN}/groups", json={"size": 2, "wait_s": 10})
    )
    await asyncio.sleep(0.3)
    assert not waiting.done()  # full: held, not refused
    await announce(client, 1)
    admitted = await waiting
    assert admitted.status_code == 201 and admitted.json()["version"] == 1
    timed_out = await client.post(f"/v1/policy-runs/{RUN}/groups", json={"size": 2, "wait_s": 0.2})
    assert_problem(timed_out, 429, "retry")
