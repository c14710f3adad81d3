"""A value the gym acknowledges is stored as it was sent, or refused before anything is applied.

Integers beyond 64 bits are JSON (orjson cannot write them; the writer used to drop the whole row after
the 201/204), so they are stored exactly. NaN and Infinity are not JSON (orjson used to store them as
`null`), so they are a 422 and the step does not happen. Both on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from conftest import AppHarness
from gymtest import assert_problem, call, open_counter, step

BIG = 2**70 + 1  # past both the signed and the unsigned 64-bit range
HUGE = -(10**40)


async def test_integers_beyond_64_bits_are_stored_exactly(gym: AppHarness) -> None:
    session_id = (await open_counter(gym.client, metadata={"big": BIG}, policy={"weights": HUGE}))[
        "session_id"
    ]
    response = await gym.client.post(
        f"/v1/sessions/{session_id}/step",
        json={"message": call("add", json.dumps({"amount": BIG})), "turn_data": {"ids": [1, BIG, HUGE]}},
    )
    assert response.status_code == 200, response.text
    # The counter's tool takes 64-bit amounts: the model reads why, and the episode goes on.
    assert json.loads(response.text)["messages"][0]["role"] == "tool"
    assert (await gym.client.delete(f"/v1/sessions/{session_id}")).status_code == 204

    await gym.app.state.store.flush()
    stored = await gym.client.get(f"/v1/rollouts/{session_id}")
    assert stored.status_code == 200, stored.text
    row = json.loads(stored.text)  # the stdlib parser keeps big integers exact
    assert row["status"] == "abandoned"
    assert row["metadata"] == {"big": BIG}
    assert row["policy"] == {"weights": HUGE}
    assert row["turns"] == [{"ids": [1, BIG, HUGE]}]
    assert json.loads(row["messages"][-2]["tool_calls"][0]["function"]["arguments"]) == {"amount": BIG}
    assert gym.app.state.store.dropped == 0


async def test_nan_and_infinity_are_refused_before_anything_is_applied(gym: AppHarness) -> None:
    session_id = (await open_counter(gym.client))["session_id"]
    before = (await gym.client.get(f"/v1/sessions/{session_id}")).json()
    message = json.dumps(call("add", {"amount": 1}))
    for constant in ("NaN", "Infinity", "-Infinity"):
        data = f'{{"x": [{constant}]}}'
        bodies = {
            f"/v1/sessions/{session_id}/step": f'{{"message": {message}, "turn_data": {data}}}',
            f"/v1/sessions/{session_id}/truncated-turn": f'{{"content": "c", "turn_data": {data}}}',
            "/v1/sessions": f'{{"env": "counter", "task_id": "counter-0000", "metadata": {data}}}',
        }
        for path, body in bodies.items():
            response = await gym.client.post(path, content=body, headers={"content-type": "application/json"})
            assert_problem(response, 422, f"{constant} is not JSON")
    after = (await gym.client.get(f"/v1/sessions/{session_id}")).json()
    assert after["turns"] == before["turns"] and after["messages"] == before["messages"]
    assert gym.app.state.manager.live_count == 1
    # The word in a string is text, not a number: accepted as is.
    ok = await step(gym.client, session_id, {"role": "assistant", "content": "NaN and Infinity"})
    assert ok.status_code == 200, ok.text
