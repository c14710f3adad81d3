"""Reading tool calls out of a model's raw completion text.

The driver owns parsing (the design brief's token-exact contract): it samples raw tokens, decodes them,
and turns the text into an OpenAI-style assistant message here, instead of trusting a server-side
parser whose output it could not map back to tokens. Two formats are read:

- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of blocks, with
  free text before them as the message's content (what Qwen2.5, Hermes and our chat template emit);
- plain JSON: the whole completion (or one fenced ```json block) is a call object or a list of them.

A completion that tries to call a tool and fails (a `<tool_call>` block that is not JSON, has no
`name`, or is never closed because the output was cut) is a `ParsedTurn` with `error` set: the driver
records it and sends the raw text as a plain message, so the environment scores what the model wrote.
Arguments that are not JSON objects are passed on as written: judging them is the environment's job
(it answers with a tool error the model reads).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ParsedTurn", "parse_tool_calls", "render_tool_call"]

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.DOTALL)


@dataclass(slots=True)
class ParsedTurn:
    """One assistant turn as the gym wants it, plus why parsing failed (if it did)."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    format: str = "text"  # "text", "hermes" or "json": how the calls were written

    def to_message(self) -> dict[str, Any]:
        """The OpenAI-form assistant message to step the gym with."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


def _call(obj: Any, index: int, prefix: str) -> dict[str, Any] | str:
    """An OpenAI tool call from a parsed `{"name", "arguments"}` object, or why it is not one."""
    if not isinstance(obj, dict):
        return f"a tool call must be a JSON object, got {type(obj).__name__}"
    if "function" in obj and isinstance(obj["function"], dict):  # already OpenAI-shaped
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return "a tool call needs a non-empty string `name`"
    arguments = obj.get("arguments", obj.get("parameters", {}))
    # A string is passed on as written: the environment judges arguments that are not JSON.
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {
        "id": f"{prefix}{index}",
        "type": "function",
        "function": {"name": name, "arguments": encoded},
    }


def _loads(text: str) -> Any:
    return json.loads(text.strip())


def _parse_hermes(text: str, prefix: str) -> ParsedTurn:
    head = text.split(_OPEN, 1)[0]
    content = head.strip() or None
    calls: list[dict[str, Any]] = []
    blocks = 0
    for block, match in enumerate(_BLOCK.finditer(text)):
        blocks += 1
        try:
            obj = _loads(match.group(1))
        except json.JSONDecodeError as exc:
            return ParsedTurn(
                content=text, error=f"tool call {block} is not JSON: {exc.msg}", format="hermes"
            )
        # One object per block (Hermes, Qwen), or a list of them in one block (SmolLM2's habit).
        for item in obj if isinstance(obj, list) and obj else [obj]:
            call = _call(item, len(calls), prefix)
            if isinstance(call, str):
                return ParsedTurn(content=text, error=f"tool call {block}: {call}", format="hermes")
            calls.append(call)
    if text.count(_OPEN) != blocks or text.count(_CLOSE) != blocks:
        return ParsedTurn(content=text, error="an unclosed or stray <tool_call> tag", format="hermes")
    return ParsedTurn(content=content, tool_calls=calls, format="hermes")


def _parse_json(text: str, prefix: str) -> ParsedTurn | None:
    """Plain JSON calls, or None when the text does not look like JSON at all (then it is prose)."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body.startswith(("{", "[")):
        return None
    try:
        obj = _loads(body)
    except json.JSONDecodeError:
        return None
    items = obj if isinstance(obj, list) else [obj]
    if not items or not all(
        isinstance(item, dict) and ("name" in item or "function" in item) for item in items
    ):
        return None  # JSON, but not a call: an answer that happens to be JSON
    calls: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        call = _call(item, index, prefix)
        if isinstance(call, str):
            return ParsedTurn(content=text, error=f"tool call {index}: {call}", format="json")
        calls.append(call)
    return ParsedTurn(content=None, tool_calls=calls, format="json")


def parse_tool_calls(text: str, *, call_id_prefix: str = "call_") -> ParsedTurn:
    """Parse a completion into content and tool calls.

    Args:
        text: the decoded completion, special tokens (the end-of-turn token) already removed.
        call_id_prefix: tool call ids are this prefix plus the call's index in the turn; the driver
            passes a per-turn prefix so ids are unique within an episode.

    Returns:
        A `ParsedTurn`; `error` is set when the text tried to call a tool and could not be read.
    """
    if _OPEN in text or _CLOSE in text:
        return _parse_hermes(text, call_id_prefix)
    parsed = _parse_json(text, call_id_prefix)
    if parsed is not None:
        return parsed
    return ParsedTurn(content=text)


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The Hermes block our chat template writes for a call (used by tests and SFT warm-ups)."""
    return f"{_OPEN}\n{json.dumps({'name': name, 'arguments': arguments})}\n{_CLOSE}"
