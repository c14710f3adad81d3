"""The tool-call verifier: golden fixtures, every call format, normalisation, set matching and bad input."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gym_verifiers.tool_call import (
    MAX_CALLS,
    ExpectedCall,
    parse_tool_calls,
    score_tool_calls,
    value_score,
    verify_tool_calls,
)

FIXTURES = Path(__file__).resolve().parent.parent / "gym_verifiers" / "fixtures" / "tool_call.jsonl"
GOLDEN = [orjson.loads(line) for line in FIXTURES.read_bytes().splitlines() if line.strip()]
WEATHER = [
    ExpectedCall(name="get_weather", arguments={"city": "Paris", "units": "celsius"}, optional=["units"])
]


def _call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return {"type": "function", "function": {"name": name, "arguments": raw}}


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
def test_golden_fixtures(case: dict[str, Any]) -> None:
    result = verify_tool_calls(case["message"], case["expected"])
    assert result.score == pytest.approx(case["score"], abs=1e-6)
    assert result.components == pytest.approx(case["components"], abs=1e-6)
    assert result.parsed is case["parsed"]
    assert result.explanation


def test_golden_fixtures_cover_full_zero_and_malformed() -> None:
    assert any(case["score"] == 1.0 for case in GOLDEN)
    assert any(case["score"] == 0.0 and case["parsed"] for case in GOLDEN)
    assert any(case["name"].startswith("malformed") and not case["parsed"] for case in GOLDEN)


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
def test_deterministic(case: dict[str, Any]) -> None:
    assert verify_tool_calls(case["message"], case["expected"]) == verify_tool_calls(
        case["message"], case["expected"]
    )


def test_sets_of_calls_match_in_any_order() -> None:
    expected = [
        ExpectedCall(name="send_message", arguments={"recipient": name, "text": "hi"})
        for name in ("Ana", "Ben", "Cy")
    ]
    calls = [_call("send_message", {"recipient": name, "text": "hi"}) for name in ("Ana", "Ben", "Cy")]
    for call_order in itertools.permutations(calls):
        assert verify_tool_calls({"tool_calls": list(call_order)}, expected).score == 1.0
    for expected_order in itertools.permutations(expected):
        assert verify_tool_calls({"tool_calls": calls}, list(expected_order)).score == 1.0


def test_greedy_matching_pairs_the_best_arguments_first() -> None:
    expected = [
        ExpectedCall(name="send_message", arguments={"recipient": "Ana", "text": "hi"}),
        ExpectedCall(name="send_message", arguments={"recipient": "Ben", "text": "hi"}),
    ]
    calls = [
        _call("send_message", {"recipient": "Ben", "text": "bye"}),
        _call("send_message", {"recipient": "Ana", "text": "hi"}),
    ]
    result = verify_tool_calls({"tool_calls": calls}, expected)
    assert [(match.expected, match.found, match.arguments) for match in result.matches] == [
        (0, 1, 1.0),
        (1, 0, 0.5),
    ]
    assert result.components == {"name": 1.0, "arguments": 0.75}


@pytest.mark.parametrize(
    ("actual", "expected", "unordered", "score"),
    [
        ("  Hello   World ", "hello world", False, 1.0),
        ("hello-world", "hello world", False, 0.0),
        (2, 2.0, False, 1.0),
        (0.1 + 0.2, 0.3, False, 1.0),
        (True, 1, False, 0.0),
        (1, True, False, 0.0),
        ("2", 2, False, 0.0),
        (None, None, False, 1.0),
        (10**400, 1.5, False, 0.0),
        (10**400, 10**400, False, 1.0),
        (["b", "a"], ["a", "b"], True, 1.0),
        (["b", "a"], ["a", "b"], False, 0.0),
        (["a", "b", "c"], ["a", "b"], True, 2 / 3),
        (["a", "a"], ["a", "b"], True, 0.5),
        ({"x": 1, "y": 2}, {"x": 1, "y": 3}, False, 0.5),
        ({"x": 1}, {"x": 1, "y": 2}, False, 0.5),
        ("x", ["x"], False, 0.0),
        ([], [], False, 1.0),
        ({}, {}, False, 1.0),
    ],
)
def test_value_normalisation(actual: Any, expected: Any, unordered: bool, score: float) -> None:
    assert value_score(actual, expected, unordered=unordered) == pytest.approx(score)


def test_optional_keys_may_be_omitted_but_score_when_given() -> None:
    assert (
        verify_tool_calls(
            {"content": '{"name": "get_weather", "arguments": {"city": "Paris"}}'}, WEATHER
        ).score
        == 1
    )
    wrong = '{"name": "get_weather", "arguments": {"city": "Paris", "units": "kelvin"}}'
    assert verify_tool_calls({"content": wrong}, WEATHER).components["arguments"] == 0.5


def test_nothing_expected_and_nothing_called_is_a_perfect_score() -> None:
    result = verify_tool_calls({"role": "assistant", "content": "No tool needed."}, [])
    assert result.score == 1.0 and not result.parsed


def test_call_shapes_and_content_parts() -> None:
    shapes = [
        {"tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"content": '{"function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}'},
        {
            "content": [
                {"type": "text", "text": '<tool_call>{"name": "get_weather",'},
                {"type": "text", "text": ' "arguments": {"city": "Paris"}}'},
            ]
        },
        {
            "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        },  # unclosed last tag
        {"content": '```\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'},
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        {"content": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]'},
    ]
    for shape in shapes:
        assert verify_tool_calls(shape, WEATHER).score == 1.0, shape


def test_too_many_calls_are_counted_not_examined() -> None:
    calls = [_call("get_weather", {"city": "Paris"})] * 1000
    parsed = parse_tool_calls({"tool_calls": calls})
    assert (len(parsed.calls), parsed.dropped, parsed.found) == (MAX_CALLS, 1000 - MAX_CALLS, 1000)
    result = score_tool_calls(parsed, WEATHER)
    assert result.score == pytest.approx(0.001)
    assert "not examined" in result.explanation


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "f", "arguments": {"a": [1]}, "unordered": ["b"]},
        {"name": "f", "arguments": {"a": 1}, "optional": ["b"]},
        {"name": "f", "arguments": {"a": "x"}, "contains": {"a": ["x"]}},
        {"name": "f", "contains": {"a": []}},
        {"name": "", "arguments": {}},
        {"name": "f", "surprise": 1},
    ],
)
def test_inconsistent_expected_specs_fail_loudly(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ExpectedCall.model_validate(spec)


BAD_INPUT: list[object] = [
    None,
    42,
    b"bytes",
    ["not", "a", "message"],
    {"tool_calls": "nope"},
    {"tool_calls": [None, 1, "x", [], {"function": None}, {"function": {"name": ""}}]},
    {"tool_calls": [{"function": {"name": "get_weather", "arguments": 12}}]},
    {"tool_calls": [{"function": {"name": "get_weather", "arguments": {1: 2, None: 3}}}]},
    {"content": "\x00" * 100_000},
    {"content": "<tool_call>" * 50_000},
    {"content": "```json\n" * 20_000},
    {"content": "[" * 100_000},
    {"content": '{"name": "get_weather", "arguments": {"city": "\ud800"}}'},
    {"content": '{"name": "' + "x" * 3_000_000 + '"}'},
    {"content": "[" + ",".join(['{"name": "get_weather"}'] * 20_000) + "]"},
    {"content": ["text", {"text": 5}, {"type": "image_url"}]},
    {
        "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": {"deep": [[[[[[["Paris"]]]]]]]}}}}
        ]
    },
]


@pytest.mark.parametrize("message", BAD_INPUT, ids=range(len(BAD_INPUT)))
def test_bad_input_never_raises(message: object) -> None:
    result = verify_tool_calls(message, WEATHER)
    assert 0.0 <= result.score <= 1.0
    assert result.score <= 0.5  # at best the right name with unusable arguments
    assert len(result.explanation) < 2000
    orjson.dumps(result.model_dump())


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_messages = st.one_of(
    _json,
    st.fixed_dictionaries({"content": st.text(max_size=200)}),
    st.fixed_dictionaries({"tool_calls": st.lists(_json, max_size=5)}),
    st.builds(
        lambda name, arguments: {"tool_calls": [{"function": {"name": name, "arguments": arguments}}]},
        st.sampled_from(["get_weather", "other", ""]),
        _json | st.text(max_size=40),
    ),
)


@settings(max_examples=300, deadline=None)
@given(_messages)
def test_arbitrary_input_never_raises_and_stays_bounded(message: object) -> None:
    result = verify_tool_calls(message, WEATHER)
    assert 0.0 <= result.score <= 1.0
    assert all(0.0 <= value <= 1.0 for value in result.components.values())
