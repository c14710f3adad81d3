"""A value the store could not keep is a 422 where it enters, before anything is applied; on SQLite and
PostgreSQL alike.

Before, a lone UTF-16 surrogate in a create's `metadata` answered 503 after the session had started (its
row refused), NUL in a policy, a 256-character run or `1e400` were acknowledged and then refused or
stored as something else, and JSON nested 250 deep passed the FastAPI routes and was refused by the
writer. Each case here was probed against both databases first.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import AppHarness
from gymtest import assert_problem, call, open_counter, wait_for_rollout

from gym_server.core.jsontext import refuse_unstorable

LONE = '"half a pair \\ud800"'  # the JSON text of a string with a lone surrogate
LOW_FIRST = '"\\udc00\\ud800"'  # both halves, in the wrong order
DEEP = "[" * 250 + "]" * 250
TOO_BIG = "1e400"  # read as infinity: orjson would store null


def body(template: str, value: str) -> bytes:
    return template.replace("VALUE", value).encode()


CREATE_FIELDS = [
    '{"env": "counter", "task_id": "counter-0000", "metadata": {"note": VALUE}}',
    '{"env": "counter", "task_id": "counter-0000", "metadata": {"nested": [{"deeper": VALUE}]}}',
    '{"env": "counter", "task_id": "counter-0000", "policy": {"model": "m", "sampling": VALUE}}',
    '{"env": "counter", "task": {"id": "t", "prompt": VALUE, "answer": 1}}',
]


async def assert_nothing_applied(gym: AppHarness, live_before: int) -> None:
    assert gym.app.state.manager.live_count == live_before
    await gym.app.state.store.flush()
    assert (gym.app.state.store.dropped, gym.app.state.store.refused) == (0, 0)


@pytest.mark.parametrize(
    ("template", "value", "needle"),
    [
        *[(template, value, "surrogate") for template in CREATE_FIELDS for value in (LONE, LOW_FIRST)],
        *[(template, TOO_BIG, "double") for template in CREATE_FIELDS if "prompt" not in template],
    ],
)
async def test_a_create_with_an_unstorable_value_is_422_and_starts_nothing(
    gym: AppHarness, template: str, value: str, needle: str
) -> None:
    response = await gym.client.post(
        "/v1/sessions", content=body(template, value), headers={"content-type": "application/json"}
    )
    assert_problem(response, 422, needle)
    await assert_nothing_applied(gym, 0)


async def test_every_write_route_refuses_a_lone_surrogate(gym: AppHarness) -> None:
    session_id = (await open_counter(gym.client))["session_id"]
    before = (await gym.client.get(f"/v1/sessions/{session_id}")).json()
    message = json.dumps(call("read"))
    bodies = {
        f"/v1/sessions/{session_id}/step": f'{{"message": {message}, "turn_data": {{"t": VALUE}}}}',
        f"/v1/sessions/{session_id}/truncated-turn": '{"content": "c", "turn_data": {"t": VALUE}}',
        "/v1/verify": (
            '{"env": "math", "task": {"id": "t", "prompt": VALUE, "answer": "1"}, "completion": "2"}'
        ),
        "/v1/verify/batch": '{"items": [{"env": "counter", "task_id": "counter-0000", "completion": VALUE}]}',
        "/v1/rollouts": '{"env": "counter", "policy": {"base_url": "http://127.0.0.1:9", "model": VALUE}}',
    }
    for path, template in bodies.items():
        response = await gym.client.post(
            path, content=body(template, LONE), headers={"content-type": "application/json"}
        )
        assert_problem(response, 422, "surrogate")
    after = (await gym.client.get(f"/v1/sessions/{session_id}")).json()
    assert (after["turns"], after["messages"]) == (before["turns"], before["messages"])
    await assert_nothing_applied(gym, 1)


async def test_json_nested_deeper_than_the_store_writes_is_422_on_every_path(gym: AppHarness) -> None:
    session_id = (await open_counter(gym.client))["session_id"]
    message = json.dumps(call("read"))
    bodies = {
        "/v1/sessions": '{"env": "counter", "task_id": "counter-0000", "metadata": {"d": VALUE}}',
        f"/v1/sessions/{session_id}/step": f'{{"message": {message}, "turn_data": {{"d": VALUE}}}}',
        f"/v1/sessions/{session_id}/truncated-turn": '{"content": "c", "turn_data": {"d": VALUE}}',
    }
    for path, template in bodies.items():
        response = await gym.client.post(
            path, content=body(template, DEEP), headers={"content-type": "application/json"}
        )
        assert response.status_code == 422, (path, response.text)
    await assert_nothing_applied(gym, 1)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"policy": {"model": "m\u0000"}}, "control character"),
        ({"policy": {"model": "m", "notes": ["a\u0000b"]}}, "NUL"),
        ({"policy": {"model": "m", "k\u0000": 1}}, "NUL"),
        ({"policy": {"model": "m" * 256}}, "256 characters"),
        ({"policy": {"model": {"name": "m"}}}, "string"),
        ({"run": "r" * 256}, "run"),
        ({"task": {"id": "t" * 256, "prompt": "p", "answer": 1}}, "task"),
    ],
)
async def test_names_and_policies_the_database_refuses_are_422(
    gym: AppHarness, extra: dict[str, Any], needle: str
) -> None:
    request = {"env": "counter", **({"task_id": "counter-0000"} if "task" not in extra else {}), **extra}
    assert_problem(await gym.client.post("/v1/sessions", json=request), 422, needle)
    await assert_nothing_applied(gym, 0)


async def test_what_the_store_can_keep_is_stored_as_sent(gym: AppHarness) -> None:
    # The limits are exact: one character, one level less is stored, NUL where JSON text keeps it.
    nested: Any = 1
    for _ in range(150):
        nested = [nested]
    session_id = (
        await open_counter(
            gym.client,
            run="r" * 255,
            policy={"model": "m" * 255, "temperature": 1e308},
            metadata={"nul": "a\u0000b", "emoji": "\U0001f9ea", "nested": nested},
        )
    )["session_id"]
    assert (await gym.client.delete(f"/v1/sessions/{session_id}")).status_code == 204
    stored = await wait_for_rollout(gym.client, session_id, "abandoned")
    assert stored["run"] == "r" * 255
    assert stored["policy"] == {"model": "m" * 255, "temperature": 1e308}
    assert stored["metadata"] == {"nul": "a\u0000b", "emoji": "\U0001f9ea", "nested": nested}


@pytest.mark.parametrize(
    ("raw", "refused"),
    [
        (b'{"a": 1e400}', True),
        (b'{"a": -2.5E+0400}', True),
        (b'{"a": [0, 7e00309]}', True),
        (b'{"a": 1' + b"0" * 309 + b".0}", True),  # 309 digits, no exponent: infinity as a float
        (b'{"a": 1e308, "b": -1e-400, "c": "e400 1e999 in text"}', False),
        (b'{"e123": "E+999", "a": 12e99}', False),
    ],
)
def test_an_out_of_range_number_is_found_however_it_is_spelled(raw: bytes, refused: bool) -> None:
    """`refuse_unstorable`'s scan only hints; each spelling of a number past a double is still refused,
    and look-alikes (in strings, negative exponents) pass."""
    if refused:
        with pytest.raises(json.JSONDecodeError, match="double"):
            refuse_unstorable(raw)
    else:
        refuse_unstorable(raw)
