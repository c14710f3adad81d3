"""A NUL character (`\\x00`) in any string a request hands the store is a 422 problem, on SQLite and
PostgreSQL alike, where PostgreSQL's `text` and `varchar` refuse it (a 500 before, issue 37 item 8).

The entry points come in classes, one test each: the URL (a path segment or a query parameter: every
filter, id and label the routes read, refused in front of them), the names of a create's body that go
to columns or into a query of the store (`run`, `task_choice.policy`, `task_choice.run`, the policy's
`model`), and the same fields through the facades and `POST /v1/rollouts`. JSON documents (metadata,
turn data, transcripts) are stored as JSON text and keep a NUL faithfully.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import AppHarness
from gymtest import assert_problem, open_counter, wait_for_rollout

NUL = "\x00"

URLS = [
    "/v1/environments/counter/curriculum?policy=%00",
    "/v1/environments/counter/curriculum?policy=m&run=a%00b",
    "/v1/rollouts?run=%00",
    "/v1/rollouts?env=%00",
    "/v1/rollouts?task_id=x%00",
    "/v1/rollouts/%00",
    "/v1/rollouts/a%00/samples",
    "/v1/environments/count%00er/tasks",
    "/v1/sessions/%00",
    "/ui/trajectories?run=%00",
    "/ui/runs?show=%00",
    "/ui/compare?a=%00&b=x",
]


@pytest.mark.parametrize("url", URLS)
async def test_a_nul_in_the_url_is_a_422_problem(gym: AppHarness, url: str) -> None:
    response = await gym.client.get(url)
    assert_problem(response, 422, "NUL")


CREATES: list[dict[str, Any]] = [
    {"run": f"a{NUL}"},
    {"task_choice": {"policy": f"m{NUL}"}},
    {"task_choice": {"policy": "m", "run": f"r{NUL}"}},
    {"policy": {"model": f"m{NUL}"}},
]


@pytest.mark.parametrize("fields", CREATES)
async def test_a_nul_in_a_create_s_names_is_a_422_and_opens_nothing(
    gym: AppHarness, fields: dict[str, Any]
) -> None:
    body: dict[str, Any] = {"env": "counter", **fields}
    if "task_choice" not in fields:
        body["task_id"] = "counter-0000"
    response = await gym.client.post("/v1/sessions", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert gym.app.state.manager.live_count == 0


FACADES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/environments/counter/openenv/reset", {"task_id": "counter-0000", "run": f"a{NUL}"}),
    ("/v1/environments/counter/openenv/reset", {"task_id": f"counter-0000{NUL}"}),
    ("/v1/environments/counter/nemo-gym/seed_session", {"task_id": "counter-0000", "run": f"a{NUL}"}),
    ("/v1/rollouts", {"env": "counter", "run": f"a{NUL}", "policy": {"base_url": "http://x", "model": "m"}}),
]


@pytest.mark.parametrize(("path", "body"), FACADES)
async def test_a_nul_through_the_facades_and_rollout_runs_is_refused(
    gym: AppHarness, path: str, body: dict[str, Any]
) -> None:
    response = await gym.client.post(path, json=body)
    assert 400 <= response.status_code < 500, response.text
    assert gym.app.state.manager.live_count == 0


async def test_json_documents_keep_a_nul_faithfully(gym: AppHarness) -> None:
    opened = await open_counter(gym.client, metadata={"note": f"a{NUL}b"})
    closed = await gym.client.delete(f"/v1/sessions/{opened['session_id']}")
    assert closed.status_code == 204, closed.text
    stored = await wait_for_rollout(gym.client, opened["session_id"], "abandoned")
    assert stored["metadata"]["note"] == f"a{NUL}b"
