"""The inspector shows an episode's forks: the episode's page lists them with their branch turns, a fork's
page names its parent, and the tree page shows each branch point's continuations side by side from there
(the shared prefix not repeated), on SQLite and PostgreSQL."""

from __future__ import annotations

from conftest import AppHarness
from gymtest import call, step, wait_for_rollout


async def test_the_fork_tree_is_shown_side_by_side_from_each_branch_point(gym: AppHarness) -> None:
    client = gym.client
    created = await client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0000", "seed": 0})
    parent = created.json()["session_id"]
    await step(client, parent, call("read"))
    await step(client, parent, call("add", {"amount": 2}))
    forks = []
    for turn, n in ((1, 2), (2, 1)):
        response = await client.post(f"/v1/sessions/{parent}/fork", json={"turn": turn, "n": n})
        assert response.status_code == 201, response.text
        forks += [(turn, item["session_id"]) for item in response.json()["forks"]]
    for amount, (_, fork) in enumerate(forks, start=5):
        await step(client, fork, call("add", {"amount": amount}))
    for session_id in (parent, *(fork for _, fork in forks)):
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
    for _, fork in forks:
        await wait_for_rollout(client, fork, "abandoned")

    page = (await client.get(f"/ui/trajectories/{parent}")).text
    assert "<h2>Forks</h2>" in page and all(fork in page for _, fork in forks)
    fork_page = (await client.get(f"/ui/trajectories/{forks[0][1]}")).text
    assert "forked from" in fork_page and f"{parent}</a> at turn 1" in fork_page

    tree = await client.get(f"/ui/trajectories/{parent}/forks")
    assert tree.status_code == 200
    text = tree.text
    assert "Branch point: after turn 1" in text and "Branch point: after turn 2" in text
    first, second = text.split("Branch point: after turn 2")
    # After turn 1: the episode's own continuation and two forks; after turn 2: the episode's and one.
    assert first.count('class="continuation') == 3 and second.count('class="continuation') == 2
    assert "4 messages shared" in first and "6 messages shared" in second  # system, user, then 2 a turn
    assert (await client.get("/ui/trajectories/nope/forks")).status_code == 404
