"""Only the gateway's own call records are served as samples (issue 37 item 7).

A native step's `turn_data` was stored verbatim in the trajectory's `turns`, where the gateway keeps its
call records marked `"source": "gateway"`: a step with `{"source": "gateway", "call": "x"}` made
`GET /v1/rollouts/{id}/samples` a 500, and a well-formed fake was served as a token-exact sample. Now the
mark's key is the server's: a step or truncated turn whose turn data holds it is a 422 before anything is
applied, and the samples (and the final answer read from the calls) skip a marked record that is not a
call record's shape, as a row stored before the refusal may hold.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import AppHarness
from gymtest import assert_problem, call, open_counter, wait_for_rollout

FORGED: list[dict[str, Any]] = [
    {"source": "gateway", "call": "x"},
    {"source": "gateway", "call": 0, "prompt_ids": [1], "completion_ids": [2], "logprobs": [-0.5]},
    {"source": "anything"},
]


@pytest.mark.parametrize("turn_data", FORGED)
async def test_a_client_s_turn_data_cannot_carry_the_server_s_mark(
    gym: AppHarness, turn_data: dict[str, Any]
) -> None:
    session_id = (await open_counter(gym.client))["session_id"]
    stepped = await gym.client.post(
        f"/v1/sessions/{session_id}/step", json={"message": call("read"), "turn_data": turn_data}
    )
    assert_problem(stepped, 422, "source")
    cut = await gym.client.post(
        f"/v1/sessions/{session_id}/truncated-turn", json={"content": "c", "turn_data": turn_data}
    )
    assert_problem(cut, 422, "source")
    state = (await gym.client.get(f"/v1/sessions/{session_id}")).json()
    assert (state["turns"], state["done"]) == (0, False)  # not stepped, not cut, nothing recorded

    ok = await gym.client.post(
        f"/v1/sessions/{session_id}/step", json={"message": call("read"), "turn_data": {"turn": 1}}
    )
    assert ok.status_code == 200, ok.text
    assert (await gym.client.delete(f"/v1/sessions/{session_id}")).status_code == 204
    stored = await wait_for_rollout(gym.client, session_id, "abandoned")
    assert stored["turns"] == [{"turn": 1}]
    samples = await gym.client.get(f"/v1/rollouts/{session_id}/samples")
    assert samples.status_code == 200, samples.text
    assert (samples.json()["num_calls"], samples.json()["samples"]) == (0, [])


async def test_marked_records_not_of_a_call_s_shape_are_no_calls(gym: AppHarness) -> None:
    """A row stored before the refusal: its malformed marked records are skipped, never a 500."""
    session_id = (await open_counter(gym.client))["session_id"]
    manager = gym.app.state.manager
    real = {"source": "gateway", "call": 0, "prompt_ids": [1, 2], "completion_ids": [3], "logprobs": [-0.1]}
    for record in [
        {"source": "gateway", "call": "x"},
        {"source": "gateway"},
        {"source": "gateway", "call": 1, "prompt_ids": ["a"], "completion_ids": [2], "logprobs": [0.0]},
        {"source": "gateway", "call": True, "prompt_ids": [1], "completion_ids": [2], "logprobs": [0.0]},
        {"source": "gateway", "call": 2, "prompt_ids": [1], "completion_ids": 5, "logprobs": None},
        real,
    ]:
        await manager.record_turn(session_id, record)
    assert (await gym.client.delete(f"/v1/sessions/{session_id}")).status_code == 204
    await wait_for_rollout(gym.client, session_id, "abandoned")
    samples = await gym.client.get(f"/v1/rollouts/{session_id}/samples")
    assert samples.status_code == 200, samples.text
    report = samples.json()
    assert report["num_calls"] == 1 and report["token_exact"] is True
    assert [sample["calls"] for sample in report["samples"]] == [[0]]
