"""Reading tool calls out of a model's raw completion text.

The driver owns parsing (the design brief's token-exact contract): it samples raw tokens, decodes them,
and turns the text into an OpenAI-style assistant message here, instead of trusting a server-side
parser whose output it could not map back to tokens. The formats of the model families people train:

| format        | written as                                                        | models               |
|---------------|-------------------------------------------------------------------|----------------------|
| `hermes`      | `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`        | Qwen2.5, Qwen3       |
| `qwen3_xml`   | `<tool_call><function=f><parameter=p>v</parameter></function>...` | Qwen3-Coder          |
| `llama3_json` | `<|python_tag|>{"name": ..., "parameters": {...}}` (or bare; `;`) | Llama 3.1-3.3        |
| `mistral`     | `[TOOL_CALLS][{...}]` or `[TOOL_CALLS]f[ARGS]{...}`               | Mistral, Devstral    |
| `pythonic`    | `[f(a=1), g()]`                                                   | Llama 3.2 / 4        |
| `harmony`     | `<|channel|>commentary to=functions.f<|message|>{...}<|call|>`    | gpt-oss              |
| `json`        | the whole turn (or a ```json fence) is a call object or a list    | any                  |

`parse_tool_calls(text)` detects the format from the turn (`format="auto"`, the default) or reads the
one named. Formats marked by special tokens (Mistral's, Llama's python tag, harmony) need the turn
decoded with special tokens as `special_text`; `text` is the turn without them (what the environment
gets as plain content). `ToolCallParser.for_tokenizer(tokenizer)` prefers the tokenizer's own response
schema (`tokenizer.parse_response`, transformers >= 5) when the tokenizer declares one.

A completion that tries to call a tool and fails (a block that is not JSON, has no name, is never
closed because the output was cut, a pythonic call with a non-literal argument) is a `ParsedTurn` with
`error` set: the driver counts it as an invalid tool call and sends the plain text as a message, so the
environment scores what the model wrote. Arguments that are not JSON objects are passed on as written:
judging them is the environment's job (it answers with a tool error the model reads).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gym_trainer.toolcalls._base import FormatParser, ParsedTurn, Schemas, tool_schemas
from gym_trainer.toolcalls._harmony import parse_harmony
from gym_trainer.toolcalls._hermes_json import OPEN, parse_hermes, parse_json
from gym_trainer.toolcalls._llama3 import PYTHON_TAG, parse_llama3_json
from gym_trainer.toolcalls._mistral import parse_mistral
from gym_trainer.toolcalls._pythonic import parse_pythonic
from gym_trainer.toolcalls._qwen3_xml import parse_qwen3_xml
from gym_trainer.toolcalls._template import TemplateParser

__all__ = [
    "FORMATS",
    "ParsedTurn",
    "TemplateParser",
    "ToolCallParser",
    "parse_tool_calls",
    "render_tool_call",
]

_PARSERS: dict[str, FormatParser] = {
    "hermes": parse_hermes,
    "qwen3_xml": parse_qwen3_xml,
    "llama3_json": parse_llama3_json,
    "mistral": parse_mistral,
    "pythonic": parse_pythonic,
    "harmony": parse_harmony,
    "json": parse_json,
}
# Every format `parse_tool_calls` reads by name, plus "auto".
FORMATS = ("auto", *_PARSERS)


def _llama3_tagged(text: str, special: str, prefix: str, schemas: Schemas) -> ParsedTurn | None:
    return parse_llama3_json(text, special, prefix, schemas) if PYTHON_TAG in special else None


# Auto's order: the special-token formats first (their markers cannot occur by accident), then the tag
# formats (Qwen3's XML before Hermes: both use <tool_call>), then the bare ones (a JSON call reads as
# `json`, several `;`-separated ones as Llama's, then pythonic lists).
_AUTO: tuple[FormatParser, ...] = (
    parse_harmony,
    parse_mistral,
    _llama3_tagged,
    parse_qwen3_xml,
    parse_hermes,
    parse_json,
    parse_llama3_json,
    parse_pythonic,
)


def parse_tool_calls(
    text: str,
    *,
    call_id_prefix: str = "call_",
    format: str = "auto",
    special_text: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> ParsedTurn:
    """Parse a completion into content and tool calls.

    Args:
        text: the decoded completion, special tokens (the end-of-turn token) already removed.
        call_id_prefix: tool call ids are this prefix plus the call's index in the turn; the driver
            passes a per-turn prefix so ids are unique within an episode.
        format: one of `FORMATS`; "auto" detects it from the turn.
        special_text: the same completion decoded with special tokens (needed by `mistral`,
            `llama3_json` with `<|python_tag|>`, `harmony`); defaults to `text`.
        tools: the session's OpenAI tools, to read untyped argument text (Qwen3's XML) by the
            declared parameter types.

    Returns:
        A `ParsedTurn`; `error` is set when the text tried to call a tool and could not be read.

    Raises:
        ValueError: `format` is not one of `FORMATS`.
    """
    return _parse(text, special_text, call_id_prefix, format, tool_schemas(tools))


def _parse(text: str, special: str | None, prefix: str, format: str, schemas: Schemas) -> ParsedTurn:
    if format != "auto" and format not in _PARSERS:
        raise ValueError(f"unknown tool-call format {format!r}; known: {', '.join(FORMATS)}")
    special = text if special is None else special
    for parse in _AUTO if format == "auto" else (_PARSERS[format],):
        parsed = parse(text, special, prefix, schemas)
        if parsed is not None:
            return parsed
    return ParsedTurn(content=text)


class ToolCallParser:
    """The parser a driver keeps for one policy: a named format, or the tokenizer's response template.

    Args:
        format: one of `FORMATS` ("auto" by default).
        template: a `TemplateParser` over a tokenizer that declares a response template; when set it
            reads every turn first. A template covers the forms its chat template renders, not always
            every form the model writes (TRL's gpt-oss template reads `to=functions.f<|channel|>...`
            but not the `<|channel|>commentary to=functions.f` the model also emits): when it finds no
            call where `format` finds one (or a broken one), the format's reading wins, so a call is
            never dropped silently.
    """

    def __init__(self, format: str = "auto", template: TemplateParser | None = None) -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown tool-call format {format!r}; known: {', '.join(FORMATS)}")
        self.format = format
        self.template = template

    def __repr__(self) -> str:
        return f"ToolCallParser({self.format!r}, template={self.template!r})"

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, format: str = "auto") -> ToolCallParser:
        """With `format="auto"`, use `tokenizer`'s own response template when it declares one."""
        template = TemplateParser.of(tokenizer) if format == "auto" and tokenizer is not None else None
        return cls(format, template)

    def parse(
        self,
        text: str,
        *,
        call_id_prefix: str = "call_",
        special_text: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        prefix: str = "",
    ) -> ParsedTurn:
        """As `parse_tool_calls`, with this parser's format or template; `prefix` (the prompt text
        before the turn) is what a response template needs to see the template's prefill."""
        special = text if special_text is None else special_text
        own = _parse(text, special, call_id_prefix, self.format, tool_schemas(tools))
        if self.template is None:
            return own
        theirs = self.template.parse(text, special, call_id_prefix, prefix=prefix, tools=tools)
        if theirs.tool_calls or not (own.tool_calls or (own.error and not theirs.error)):
            return theirs
        return own


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The Hermes block our chat template writes for a call (used by tests and SFT warm-ups)."""
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
