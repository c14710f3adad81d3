"""The rollout buffer under kill -9, on SQLite and PostgreSQL: every answer a trainer or producer got was
committed first, so a server killed right after them keeps the announced versions, the consumed groups
and the leases; an unacknowledged lease (a trainer killed before it acknowledged) hands its group out
again once it expires, and nothing is handed out twice otherwise."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from conftest import ServerProcess
from gymtest import call

pytestmark = pytest.mark.slow


def _post(client: httpx.Client, path: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    return dict(response.json())


def _play_group(client: httpx.Client, run: str) -> str:
    group = _post(client, f"/v1/policy-runs/{run}/groups", {"size": 1}, 201)
    created = _post(
        client,
        "/v1/sessions",
        {"env": "counter", "task_id": "counter-0001", "run": run, "metadata": group["metadata"]},
        201,
    )
    sid = created["session_id"]
    _post(client, f"/v1/sessions/{sid}/step", {"message": call("read")})
    _post(client, f"/v1/sessions/{sid}/verify", {})
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    return str(group["group_id"])


def test_the_buffer_keeps_what_it_acknowledged_through_sigkill(
    server_factory: Callable[..., ServerProcess], database_url: str
) -> None:
    run = f"killed-{uuid.uuid4().hex[:8]}"
    server = server_factory(database_url)
    server.start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        _post(
            client,
            f"/v1/policy-runs/{run}/versions",
            {"version": 0, "max_staleness": 1, "groups_per_step": 2},
        )
        consumed, unacknowledged, waiting = (_play_group(client, run) for _ in range(3))
        first = _post(client, f"/v1/policy-runs/{run}/pull", {"max_groups": 1})
        assert [g["group_id"] for g in first["groups"]] == [consumed]
        _post(client, f"/v1/policy-runs/{run}/acks", {"lease_id": first["lease_id"]})
        lost = _post(client, f"/v1/policy-runs/{run}/pull", {"max_groups": 1, "lease_s": 1})
        assert [g["group_id"] for g in lost["groups"]] == [unacknowledged]
        _post(client, f"/v1/policy-runs/{run}/versions", {"version": 1})
    server.kill()  # right after the last answer: no shutdown hook, no drain

    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            version = connection.execute(
                sa.text("SELECT version FROM policy_runs WHERE run = :run"), {"run": run}
            ).scalar_one()
            rows = connection.execute(
                sa.text("SELECT id, state FROM buffer_groups WHERE run = :run"), {"run": run}
            )
            states: dict[str, str] = {group_id: state for group_id, state in rows}
    finally:
        engine.dispose()
    assert version == 1
    assert states[consumed] == "consumed" and states[unacknowledged] == "leased"

    restarted = server_factory(database_url)
    restarted.start()
    try:
        time.sleep(1.1)  # the unacknowledged lease expires
        with httpx.Client(base_url=restarted.url, timeout=30) as client:
            again = _post(client, f"/v1/policy-runs/{run}/pull", {"max_groups": 4})
            handed = {g["group_id"]: g["deliveries"] for g in again["groups"]}
            assert handed == {unacknowledged: 2, waiting: 1}  # never the consumed one
            ack = _post(client, f"/v1/policy-runs/{run}/acks", {"lease_id": again["lease_id"]})
            assert ack["consumed"] == 2
            late = client.post(f"/v1/policy-runs/{run}/acks", json={"lease_id": lost["lease_id"]})
            assert late.status_code == 409  # its group went to the later lease
    finally:
        restarted.stop()
