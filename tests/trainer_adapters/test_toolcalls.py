"""Tool-call parsing: Hermes blocks, plain JSON, and every way a model gets them wrong."""

from __future__ import annotations

import json

import pytest

from gym_trainer.toolcalls import parse_tool_calls, render_tool_call


def test_hermes_blocks_with_leading_content() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "read", "arguments": {}}\n</tool_call>\n' + render_tool_call(
        "add", {"amount": 3}
    )
    parsed = parse_tool_calls(text, call_id_prefix="t1_")
    assert parsed.error is None and parsed.format == "hermes"
    assert parsed.content == "Let me check."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["read", "add"]
    assert [c["id"] for c in parsed.tool_calls] == ["t1_0", "t1_1"]
    assert json.loads(parsed.tool_calls[1]["function"]["arguments"]) == {"amount": 3}
    message = parsed.to_message()
    assert message["role"] == "assistant" and len(message["tool_calls"]) == 2


def test_plain_json_object_list_and_fence() -> None:
    one = parse_tool_calls('{"name": "submit", "arguments": {}}')
    assert one.format == "json" and one.tool_calls[0]["function"]["name"] == "submit"
    assert one.content is None
    many = parse_tool_calls('[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "parameters": {}}]')
    assert [c["function"]["name"] for c in many.tool_calls] == ["a", "b"]
    fenced = parse_tool_calls('```json\n{"name": "a", "arguments": {"q": "é"}}\n```')
    assert json.loads(fenced.tool_calls[0]["function"]["arguments"]) == {"q": "é"}
    openai = parse_tool_calls('{"type": "function", "function": {"name": "a", "arguments": "{}"}}')
    assert openai.tool_calls[0]["function"] == {"name": "a", "arguments": "{}"}


@pytest.mark.parametrize(
    "text",
    ["The answer is \\boxed{4}.", "", "{not json", '{"answer": 4}', "[1, 2]", "[]"],
)
def test_prose_and_non_call_json_are_plain_content(text: str) -> None:
    parsed = parse_tool_calls(text)
    assert parsed.error is None and parsed.tool_calls == [] and parsed.content == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("<tool_call>\n{bad json}\n</tool_call>", "not JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', "name"),
        ('<tool_call>{"name": "read", "arguments": {}}', "unclosed"),  # cut off by max tokens
        ('<tool_call>["read"]</tool_call>', "JSON object"),
        ("<tool_call>[]</tool_call>", "JSON object"),
        ("x </tool_call>", "unclosed or stray"),
        ('{"name": "", "arguments": {}}', "name"),
    ],
)
def test_malformed_calls_are_parse_failures_keeping_the_raw_text(text: str, why: str) -> None:
    parsed = parse_tool_calls(text)
    assert parsed.error is not None and why in parsed.error
    assert parsed.tool_calls == [] and parsed.content == text
    assert parsed.to_message() == {"role": "assistant", "content": text}


def test_string_arguments_are_passed_through_for_the_environment_to_judge() -> None:
    parsed = parse_tool_calls('<tool_call>{"name": "add", "arguments": "amount=3"}</tool_call>')
    assert parsed.error is None
    assert parsed.tool_calls[0]["function"]["arguments"] == "amount=3"


def test_a_list_of_calls_in_one_block() -> None:
    parsed = parse_tool_calls(
        '<tool_call>[{"name": "read", "arguments": {}}, {"name": "submit"}]</tool_call>'
    )
    assert parsed.error is None
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["read", "submit"]
    assert [c["id"] for c in parsed.tool_calls] == ["call_0", "call_1"]
