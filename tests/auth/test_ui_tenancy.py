"""The rollout inspector with keys on: every page reads through the request's tenant, so a key never sees
another tenant's runs, trajectories or comparisons (404 for another tenant's trajectory, as in the API)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from authtest import KeyMaker, bearer
from store.test_export import store_records

from gym_server.store.records import TrajectoryRecord


def _episode(tenant: str, reward: float) -> TrajectoryRecord:
    return TrajectoryRecord(
        id=f"{tenant}-episode",
        run=f"{tenant}-run",
        env="math",
        env_version="v1",
        task_id="shared-task",
        tenant=tenant,
        status="completed",
        reward=reward,
        created_at=datetime(2026, 11, 20, tzinfo=UTC),
    )


async def test_inspector_pages_show_only_the_keys_tenant(
    secured: Callable[..., Any], keys: KeyMaker, tenant: Callable[[], str], database_url: str
) -> None:
    mine, theirs = tenant(), tenant()
    key = keys.create(mine, "read")
    store_records(database_url, [_episode(mine, 1.0), _episode(theirs, 0.0)])
    async with secured() as gym:
        headers = bearer(key)
        runs = await gym.client.get("/ui/runs", headers=headers)
        assert runs.status_code == 200
        assert f"{mine}-run" in runs.text and f"{theirs}-run" not in runs.text
        listed = await gym.client.get("/ui/trajectories", params={"run": f"{theirs}-run"}, headers=headers)
        assert "No trajectory matches." in listed.text and f"{theirs}-episode" not in listed.text
        assert (await gym.client.get(f"/ui/trajectories/{mine}-episode", headers=headers)).status_code == 200
        other = await gym.client.get(f"/ui/trajectories/{theirs}-episode", headers=headers)
        assert other.status_code == 404  # as one never stored: ids do not leak
        compare = await gym.client.get(
            "/ui/compare", params={"a": f"{mine}-run", "b": f"{theirs}-run"}, headers=headers
        )
        assert "0 tasks in common" in compare.text  # their run is empty to this key
        # Without a key the pages are not served at all (a browser is sent to the login form).
        assert (await gym.client.get("/ui/runs")).status_code in (303, 401)
