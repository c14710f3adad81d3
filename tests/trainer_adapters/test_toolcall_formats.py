"""Tool-call formats of the model families people train, against golden fixtures.

Each `fixtures/toolcalls/<family>.json` holds completions as the model writes them (decoded with special
tokens), its special tokens, and what must come out: the content and calls, or a parse error. Every
case is parsed twice, with its format named and with auto-detection; the plain `text` the parser gets
is the completion with the special tokens removed, as `decode(skip_special_tokens=True)` gives it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_trainer.toolcalls import FORMATS, ToolCallParser, parse_tool_calls

FIXTURES = Path(__file__).parent / "fixtures" / "toolcalls"
FAMILIES = {path.stem: json.loads(path.read_text()) for path in sorted(FIXTURES.glob("*.json"))}
CASES = [
    pytest.param(family, case, id=f"{name}: {case['name']}")
    for name, family in FAMILIES.items()
    for case in family["cases"]
]


def _plain(completion: str, specials: list[str]) -> str:
    for token in specials:
        completion = completion.replace(token, "")
    return completion


def test_every_family_has_good_malformed_and_several_call_fixtures() -> None:
    assert set(FAMILIES) == set(FORMATS) - {"auto", "json"}
    for name, family in FAMILIES.items():
        cases = family["cases"]
        assert any("error" in case for case in cases), name
        assert any(len(case.get("calls", [])) == 1 for case in cases), name
        assert any(len(case.get("calls", [])) > 1 for case in cases), name


@pytest.mark.parametrize(("family", "case"), CASES)
@pytest.mark.parametrize("how", ["named", "auto"])
def test_golden_completion(family: dict[str, Any], case: dict[str, Any], how: str) -> None:
    special = case["completion"]
    text = _plain(special, family["special_tokens"])
    fmt = family["format"] if how == "named" else "auto"
    parsed = parse_tool_calls(
        text, call_id_prefix="t3_", format=fmt, special_text=special, tools=family["tools"]
    )
    if "error" in case:
        assert parsed.error is not None and case["error"] in parsed.error, parsed
        # What the gym gets: the plain text as a message, no calls (scored like any answer).
        assert parsed.tool_calls == [] and parsed.to_message() == {"role": "assistant", "content": text}
        return
    assert parsed.error is None, parsed.error
    expected_format = case.get("auto_format", family["format"]) if how == "auto" else family["format"]
    assert parsed.format == expected_format
    assert parsed.content == case["content"]
    assert parsed.reasoning == case.get("reasoning")
    calls = [
        {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}
        for call in parsed.tool_calls
    ]
    assert calls == case["calls"]
    assert [call["id"] for call in parsed.tool_calls] == [f"t3_{i}" for i in range(len(calls))]
    assert all(call["type"] == "function" for call in parsed.tool_calls)


@pytest.mark.parametrize("fmt", sorted(set(FORMATS) - {"auto"}))
def test_prose_is_content_in_every_format(fmt: str) -> None:
    text = "The answer is 42. [see above]"
    parsed = parse_tool_calls(text, format=fmt)
    assert parsed.error is None and parsed.tool_calls == [] and parsed.content == text


def test_a_named_format_reads_only_its_own_calls() -> None:
    hermes = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    assert parse_tool_calls(hermes, format="pythonic").tool_calls == []
    assert parse_tool_calls("[get_time()]", format="hermes").tool_calls == []


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tool-call format 'xml'"):
        parse_tool_calls("x", format="xml")
    with pytest.raises(ValueError, match="unknown tool-call format"):
        ToolCallParser("xml")


def test_qwen3_values_without_schema_read_as_json_literals_else_text() -> None:
    text = (
        "<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=s>\nhello\n</parameter>\n"
        '<parameter=o>\n{"a": [1]}\n</parameter>\n</function>\n</tool_call>'
    )
    parsed = parse_tool_calls(text)
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {
        "n": 3,
        "s": "hello",
        "o": {"a": [1]},
    }


# The response templates TRL ships for these families, with the prompt end they follow (its prefill).
TEMPLATES = {
    "hermes": ("qwen3_template", "<|im_start|>assistant\n"),
    "llama3_json": ("llama3_template", "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "harmony": ("gptoss_template", "<|start|>assistant"),
}
# Fixtures in the form each template reads (TRL's are written for what the chat template renders).
TEMPLATE_CASES = [
    *(("hermes", case["name"]) for case in FAMILIES["hermes"]["cases"]),
    ("llama3_json", "bare JSON call"),
    ("harmony", "recipient in the role header"),
    ("harmony", "a final answer, no call"),
]


@pytest.fixture(scope="module")
def template_tokenizer() -> Any:
    pytest.importorskip("trl")
    from gym_trainer.models import build_tiny_tokenizer

    return build_tiny_tokenizer()


def _named(cases: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(case for case in cases if case["name"] == name)


@pytest.mark.parametrize(("family_name", "case_name"), TEMPLATE_CASES)
def test_the_tokenizers_own_response_template_agrees_with_the_fixtures(
    template_tokenizer: Any, family_name: str, case_name: str
) -> None:
    """transformers' `parse_response` with TRL's response template for the family reads the golden
    completion as the fixture says (a malformed one: as an error)."""
    from trl import chat_template_utils

    family = FAMILIES[family_name]
    case = _named(family["cases"], case_name)
    attribute, prefix = TEMPLATES[family_name]
    template_tokenizer.response_template = getattr(chat_template_utils, attribute)
    parser = ToolCallParser.for_tokenizer(template_tokenizer)
    assert parser.template is not None
    special = case["completion"]
    text = _plain(special, family["special_tokens"])
    parsed = parser.template.parse(text, special, "c_", prefix=prefix, tools=family["tools"])
    if "error" in case:
        assert parsed.error is not None and parsed.format == "template"
        assert parsed.to_message() == {"role": "assistant", "content": text}
        return
    assert parsed.error is None and parsed.format == "template"
    assert parsed.content == case["content"]
    calls = [
        {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
        for c in parsed.tool_calls
    ]
    assert calls == case["calls"]


def test_a_call_the_template_misses_is_read_by_the_format_parsers(template_tokenizer: Any) -> None:
    """TRL's gpt-oss template does not read `<|channel|>commentary to=functions.f`, which gpt-oss
    writes: the parser falls back to the harmony reader instead of dropping the call."""
    from trl import chat_template_utils

    template_tokenizer.response_template = chat_template_utils.gptoss_template
    parser = ToolCallParser.for_tokenizer(template_tokenizer)
    case = _named(FAMILIES["harmony"]["cases"], "analysis then one call")
    special = case["completion"]
    text = _plain(special, FAMILIES["harmony"]["special_tokens"])
    assert parser.template is not None
    assert parser.template.parse(text, special, "c_", prefix="<|start|>assistant").tool_calls == []
    parsed = parser.parse(text, special_text=special, prefix="<|start|>assistant")
    assert parsed.format == "harmony" and parsed.tool_calls[0]["function"]["name"] == "get_weather"
    # A turn both read the same way stays the template's.
    final = _named(FAMILIES["harmony"]["cases"], "a final answer, no call")["completion"]
    assert parser.parse("x", special_text=final, prefix="<|start|>assistant").format == "template"


def test_a_tokenizer_without_a_response_template_uses_the_format_parsers(template_tokenizer: Any) -> None:
    from gym_trainer.models import build_tiny_tokenizer

    plain = build_tiny_tokenizer()
    assert getattr(plain, "response_template", None) is None
    assert ToolCallParser.for_tokenizer(plain).template is None
    assert ToolCallParser.for_tokenizer(None, "mistral").format == "mistral"
