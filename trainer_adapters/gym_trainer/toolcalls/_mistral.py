"""Mistral calls after the `[TOOL_CALLS]` special token, in both of Mistral's tokenizer generations:

- up to v7 (Mistral 7B v0.3, Nemo, Small 3.1): `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`;
- v11 and later (Small 3.2, Magistral, Devstral): `[TOOL_CALLS]name[ARGS]{...}` once per call, with an
  optional `[CALL_ID]id` before `[ARGS]`.

Free text before the first `[TOOL_CALLS]` is the message's content.
"""

from __future__ import annotations

import json
from typing import Any

from gym_trainer.toolcalls._base import (
    ParsedTurn,
    Schemas,
    failed,
    make_call,
    openai_call,
    strip_end,
)

__all__ = ["TOOL_CALLS", "parse_mistral"]

TOOL_CALLS, _ARGS, _CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_FMT = "mistral"


def _json_list(body: str, prefix: str) -> list[dict[str, Any]] | str:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return f"the calls are not JSON: {exc.msg}"
    calls: list[dict[str, Any]] = []
    for index, item in enumerate(obj if isinstance(obj, list) else [obj]):
        call = openai_call(item, index, prefix)
        if isinstance(call, str):
            return f"tool call {index}: {call}"
        calls.append(call)
    return calls or "an empty list of calls"


def _segments(segments: list[str], prefix: str) -> list[dict[str, Any]] | str:
    calls: list[dict[str, Any]] = []
    for index, segment in enumerate(segments):
        if _ARGS not in segment:
            return f"tool call {index} has no [ARGS]"
        name, arguments = segment.split(_ARGS, 1)
        name = name.split(_CALL_ID, 1)[0].strip()
        if not name:
            return f"tool call {index} has no function name"
        try:
            value = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return f"tool call {index} ({name}): arguments are not JSON: {exc.msg}"
        calls.append(make_call(name, value, index, prefix))
    return calls


def parse_mistral(text: str, special: str, prefix: str, schemas: Schemas) -> ParsedTurn | None:
    if TOOL_CALLS not in special:
        return None
    head, *segments = strip_end(special).split(TOOL_CALLS)
    first = segments[0].strip()
    if first.startswith(("[", "{")):
        if len(segments) > 1:
            return failed(text, "several [TOOL_CALLS] tokens around a JSON list of calls", _FMT)
        calls = _json_list(first, prefix)
    else:
        calls = _segments(segments, prefix)
    if isinstance(calls, str):
        return failed(text, calls, _FMT)
    return ParsedTurn(content=head.strip() or None, tool_calls=calls, format=_FMT)
