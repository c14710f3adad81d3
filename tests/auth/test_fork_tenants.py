"""Forks and tenants: a tenant forks its own episodes (the forks are its own, stored under it, and count
against its live-session quota), and another tenant's episode, live or stored, answers exactly as an
unknown id does (404), so a fork request cannot tell whether an id exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from authtest import KeyMaker, bearer
from gymtest import call

SESSION = {"env": "counter", "task_id": "counter-0000", "seed": 0}


def without_id(problem: dict[str, Any], session_id: str) -> dict[str, Any]:
    """The problem with the asked-for id blanked, so two ids' answers compare."""
    return {key: str(value).replace(session_id, "ID") for key, value in problem.items()}


async def test_another_tenants_episode_forks_as_an_unknown_one(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str]
) -> None:
    owner, other = tenant(), tenant()
    mine, theirs = bearer(keys.create(owner, "episodes", "read")), bearer(keys.create(other, "episodes"))
    async with secured(quotas={"live_sessions": 2}) as gym:
        client = gym.client
        live = (await client.post("/v1/sessions", json=SESSION, headers=mine)).json()["session_id"]
        await client.post(f"/v1/sessions/{live}/step", json={"message": call("read")}, headers=mine)
        closed = (await client.post("/v1/sessions", json=SESSION, headers=mine)).json()["session_id"]
        assert (await client.delete(f"/v1/sessions/{closed}", headers=mine)).status_code == 204

        unknown_id = "0" * 32
        unknown = await client.post(f"/v1/sessions/{unknown_id}/fork", json={"turn": 0}, headers=theirs)
        assert unknown.status_code == 404
        for session_id in (live, closed):
            answer = await client.post(f"/v1/sessions/{session_id}/fork", json={"turn": 0}, headers=theirs)
            assert answer.status_code == 404
            assert without_id(answer.json(), session_id) == without_id(unknown.json(), unknown_id)

        # The owner's fork is the owner's: over its quota of 2 live sessions with 2 forks, under it with 1.
        over = await client.post(f"/v1/sessions/{live}/fork", json={"turn": 1, "n": 2}, headers=mine)
        assert over.status_code == 429, over.text
        forked = await client.post(f"/v1/sessions/{live}/fork", json={"turn": 1}, headers=mine)
        assert forked.status_code == 201, forked.text
        (item,) = forked.json()["forks"]
        assert (await client.delete(f"/v1/sessions/{item['session_id']}", headers=mine)).status_code == 204
        stored = await client.get(f"/v1/rollouts/{item['session_id']}", headers=mine)
        assert stored.status_code == 200 and stored.json()["tenant"] == owner
        assert stored.json()["parent_id"] == live
