"""The NeMo Gym wire rules without a server: cookies, tool outputs, final answers, seed bodies."""

from __future__ import annotations

import orjson
import pytest

from gym_server.core.errors import InvalidRequest
from gym_server.protocols.nemo_gym import wire
from gym_server.sdk.environment import VerifyResult


def test_the_cookie_round_trips_among_other_cookies() -> None:
    name, value = wire.cookie_header("abc123", 600)
    assert name == b"set-cookie" and value.startswith(b"gym_server_nemo_gym=abc123; Max-Age=600; Path=/")
    headers = [(b"host", b"x"), (b"cookie", b"other=1; gym_server_nemo_gym=abc123; more=2")]
    assert wire.session_from_cookie(headers) == "abc123"
    assert wire.session_from_cookie([(b"cookie", b"gym_server_nemo_gym=; x=1")]) is None
    assert wire.session_from_cookie([]) is None
    assert wire.cookie_header("a", 0.2)[1].split(b"; ")[1] == b"Max-Age=1"  # never an instant expiry


def test_tool_output_is_the_content_as_json() -> None:
    assert wire.tool_output("20") == b"20"
    assert wire.tool_output('{"a": [1]}') == b'{"a": [1]}'
    assert orjson.loads(wire.tool_output("submitted 26")) == "submitted 26"
    assert wire.is_tool_error("Error: unknown tool") and not wire.is_tool_error("20")


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ({"output": [{"type": "message", "role": "assistant", "content": "42"}]}, "42"),
        (
            {
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text} for text in ("4", "2")],
                    }
                ]
            },
            "42",
        ),
        ({"output": [{"type": "function_call", "name": "read", "arguments": "{}", "call_id": "c"}]}, None),
        ({"output": [{"type": "message", "role": "assistant", "content": [{"type": "refusal"}]}]}, None),
        ({"output": []}, None),
        ({}, None),
        ("not a response", None),
    ],
)
def test_the_final_answer_is_the_last_output_item_when_it_is_an_assistant_message(
    response: object, expected: str | None
) -> None:
    assert wire.final_answer(response) == expected


def test_seed_bodies() -> None:
    params = wire.parse_seed(
        wire.parse_object(b'{"responses_create_params": {}, "task_id": "t", "seed": 3, "row_id": 9}')
    )
    assert (params.task_id, params.seed, params.split) == ("t", 3, None)
    assert wire.parse_object(b"") == {}
    with pytest.raises(InvalidRequest, match="JSON object"):
        wire.parse_object(b"[1]")
    with pytest.raises(InvalidRequest, match="seed"):
        wire.parse_seed({"seed": "x"})


def test_a_tool_calls_body_travels_verbatim_as_its_arguments() -> None:
    message = wire.assistant_tool_call("add", b' {"amount": 6} ')
    assert message["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"amount": 6}'}
    assert wire.assistant_tool_call("read", b"")["tool_calls"][0]["function"]["arguments"] == "{}"


def test_the_verify_answer_is_the_request_plus_the_reward() -> None:
    request = {"responses_create_params": {"input": []}, "response": {"output": []}, "expected": 3}
    result = VerifyResult(reward=0.5, components={"a": 1.0}, info={"k": "v"})
    answer = orjson.loads(wire.verify_body(request, result, "sid"))
    assert answer == {
        **request,
        "reward": 0.5,
        "reward_components": {"a": 1.0},
        "gym_session_id": "sid",
        "gym_failure": None,
        "gym_verify_info": {"k": "v"},
    }
    failed = VerifyResult(reward=0.0, failure="judge_failed")
    assert orjson.loads(wire.verify_body(request, failed, "sid"))["_ng_failure_class"] == "judge_failed"
