"""Llama 3.x JSON calls: `{"name": ..., "parameters": {...}}`, after `<|python_tag|>` or bare, several
separated by `;` (the form Llama 3.1-3.3's templates ask for with JSON-based tool calling).

`<|python_tag|>` is a special token, so it is looked for in the turn decoded with special tokens. After
it, anything but call objects is a parse error (the model announced a call); a bare turn that does not
read as call objects is prose.
"""

from __future__ import annotations

import json
from typing import Any

from gym_trainer.toolcalls._base import (
    ParsedTurn,
    Schemas,
    failed,
    openai_call,
    strip_end,
)

__all__ = ["PYTHON_TAG", "parse_llama3_json"]

PYTHON_TAG = "<|python_tag|>"
_FMT = "llama3_json"


def _objects(body: str) -> list[Any] | str:
    """JSON values separated by `;` or whitespace, or why the body is not that."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    position = 0
    while True:
        while position < len(body) and body[position] in " \t\r\n;":
            position += 1
        if position == len(body):
            return values if values else "no call after <|python_tag|>"
        try:
            value, position = decoder.raw_decode(body, position)
        except json.JSONDecodeError as exc:
            return f"tool call {len(values)} is not JSON: {exc.msg}"
        values.append(value)


def parse_llama3_json(text: str, special: str, prefix: str, schemas: Schemas) -> ParsedTurn | None:
    tagged = PYTHON_TAG in special
    if tagged:
        head, body = special.split(PYTHON_TAG, 1)
        content, body, source = head.strip() or None, strip_end(body), text
    else:
        content, body, source = None, text.strip(), text
        if not body.startswith("{"):
            return None
    values = _objects(body)
    if isinstance(values, str):
        return failed(source, values, _FMT) if tagged else None
    if not tagged and not all(isinstance(v, dict) and "name" in v for v in values):
        return None  # JSON that is not a call: an answer
    calls: list[dict[str, Any]] = []
    for index, value in enumerate(values):
        call = openai_call(value, index, prefix)
        if isinstance(call, str):
            return failed(source, f"tool call {index}: {call}", _FMT)
        calls.append(call)
    return ParsedTurn(content=content, tool_calls=calls, format=_FMT)
