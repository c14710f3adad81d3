"""Hermes / Qwen2.5 blocks and plain JSON calls.

- Hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of blocks, with free
  text before them as the message's content (Qwen2.5, Hermes, Qwen3's JSON form, our chat template);
  a list of calls in one block is accepted too (SmolLM2's habit).
- JSON: the whole turn (or one fenced ```json block) is a call object or a list of them. This is also
  what Llama 3's single JSON call and Mistral's `[TOOL_CALLS][...]` read as once the special token is
  gone.

A block that is not JSON, has no `name`, or is never closed (the output was cut) is a parse error.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gym_trainer.toolcalls._base import ParsedTurn, Schemas, failed, openai_call

__all__ = ["OPEN", "parse_hermes", "parse_json", "parse_json_calls"]

OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.DOTALL)


def parse_hermes(text: str, special: str, prefix: str, schemas: Schemas) -> ParsedTurn | None:
    if OPEN not in text and _CLOSE not in text:
        return None
    content = text.split(OPEN, 1)[0].strip() or None
    calls: list[dict[str, Any]] = []
    blocks = 0
    for block, match in enumerate(_BLOCK.finditer(text)):
        blocks += 1
        try:
            obj = json.loads(match.group(1).strip())
        except json.JSONDecodeError as exc:
            return failed(text, f"tool call {block} is not JSON: {exc.msg}", "hermes")
        for item in obj if isinstance(obj, list) and obj else [obj]:
            call = openai_call(item, len(calls), prefix)
            if isinstance(call, str):
                return failed(text, f"tool call {block}: {call}", "hermes")
            calls.append(call)
    if text.count(OPEN) != blocks or text.count(_CLOSE) != blocks:
        return failed(text, "an unclosed or stray <tool_call> tag", "hermes")
    return ParsedTurn(content=content, tool_calls=calls, format="hermes")


def parse_json_calls(body: str, text: str, prefix: str, fmt: str) -> ParsedTurn | None:
    """`body` as one call object or a list of them; None when it is not JSON or not calls."""
    body = body.strip()
    if not body.startswith(("{", "[")):
        return None
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    items = obj if isinstance(obj, list) else [obj]
    if not items or not all(
        isinstance(item, dict) and ("name" in item or "function" in item) for item in items
    ):
        return None  # JSON, but not a call: an answer that happens to be JSON
    calls: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        call = openai_call(item, index, prefix)
        if isinstance(call, str):
            return failed(text, f"tool call {index}: {call}", fmt)
        calls.append(call)
    return ParsedTurn(content=None, tool_calls=calls, format=fmt)


def parse_json(text: str, special: str, prefix: str, schemas: Schemas) -> ParsedTurn | None:
    """Plain JSON calls, or None when the text does not look like JSON calls at all (then it is prose)."""
    body = text.strip()
    fenced = _FENCE.match(body)
    return parse_json_calls(fenced.group(1) if fenced else body, text, prefix, "json")
