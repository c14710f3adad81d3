"""What every tool-call format parser shares: the parsed turn, the OpenAI call it builds, the error.

A format parser takes the turn twice: `text` (decoded without special tokens: what the environment gets
as plain content) and `special` (decoded with them: Mistral's `[TOOL_CALLS]`, Llama's `<|python_tag|>`
and gpt-oss's `<|channel|>` are special tokens, invisible in `text`). It returns `None` when the turn
holds no attempt at its format (the caller then tries another, or takes the turn as prose), a
`ParsedTurn` with calls, or one with `error` set: the turn tried to call a tool and could not be read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "END_MARKERS",
    "FormatParser",
    "ParsedTurn",
    "Schemas",
    "failed",
    "make_call",
    "openai_call",
    "strip_end",
    "tool_schemas",
]

# Parameter schemas by tool name (from the session's OpenAI tools): formats that write arguments as
# untyped text (Qwen3's XML) read them with the declared types.
Schemas = Mapping[str, Mapping[str, Any]]

# End-of-turn tokens a decoded turn may still carry at its end (ChatML, Llama 3/4, Mistral, Gemma, gpt-oss).
END_MARKERS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "</s>",
    "<eos>",
    "<end_of_turn>",
    "<|return|>",
    "<|call|>",
    "<|end|>",
    "<|eot|>",
)


@dataclass(slots=True)
class ParsedTurn:
    """One assistant turn as the gym wants it, plus why parsing failed (if it did)."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    # How the calls were written: "text" (none), "hermes", "json", "qwen3_xml", "llama3_json",
    # "mistral", "pythonic", "harmony", or "template" (the tokenizer's own response schema).
    format: str = "text"
    reasoning: str | None = None  # a reasoning channel (gpt-oss "analysis", <think>), kept out of the message

    def to_message(self) -> dict[str, Any]:
        """The OpenAI-form assistant message to step the gym with."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


FormatParser = Callable[[str, str, str, "Schemas"], "ParsedTurn | None"]


def failed(text: str, error: str, fmt: str) -> ParsedTurn:
    """A turn that tried to call a tool and could not be read: its plain text goes to the environment."""
    return ParsedTurn(content=text, error=error, format=fmt)


def openai_call(obj: Any, index: int, prefix: str) -> dict[str, Any] | str:
    """An OpenAI tool call from a parsed `{"name", "arguments"|"parameters"}` object, or why it is not."""
    if not isinstance(obj, dict):
        return f"a tool call must be a JSON object, got {type(obj).__name__}"
    if "function" in obj and isinstance(obj["function"], dict):  # already OpenAI-shaped
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return "a tool call needs a non-empty string `name`"
    arguments = obj.get("arguments", obj.get("parameters", {}))
    return make_call(name, arguments, index, prefix)


def make_call(name: str, arguments: Any, index: int, prefix: str) -> dict[str, Any]:
    """The OpenAI tool call. String arguments are passed on as written: the environment judges
    arguments that are not JSON (it answers with a tool error the model reads)."""
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": f"{prefix}{index}", "type": "function", "function": {"name": name, "arguments": encoded}}


def strip_end(special: str) -> str:
    """The turn without the end-of-turn tokens at its end."""
    body = special.rstrip()
    stripped = True
    while stripped:
        stripped = False
        for marker in END_MARKERS:
            if body.endswith(marker):
                body, stripped = body[: -len(marker)].rstrip(), True
    return body


def tool_schemas(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    """Parameter schemas by name from OpenAI tools (`{"type": "function", "function": {...}}`)."""
    schemas: dict[str, Mapping[str, Any]] = {}
    for tool in tools or ():
        function = tool.get("function", tool)
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            schemas[function["name"]] = parameters if isinstance(parameters, Mapping) else {}
    return schemas
