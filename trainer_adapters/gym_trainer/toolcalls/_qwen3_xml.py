"""Qwen3-Coder's XML calls: `<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>`.

Values are untyped text, so they are read with the tool's declared parameter types when the session's
tools are known (a `string` stays text even when it looks like a number), else as a JSON literal when
they are one (`3`, `true`, `{"a": 1}`) and as text otherwise. A value that does not read as its declared
type is passed on as text: judging it is the environment's job, as for any wrong argument.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gym_trainer.toolcalls._base import ParsedTurn, Schemas, failed, make_call

__all__ = ["parse_qwen3_xml"]

_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)
_FMT = "qwen3_xml"


def _typed(raw: str, schema: Mapping[str, Any] | None) -> Any:
    kind = schema.get("type") if schema else None
    if kind == "string":
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _arguments(body: str, name: str, schemas: Schemas) -> dict[str, Any] | str:
    properties = schemas.get(name, {}).get("properties", {})
    arguments: dict[str, Any] = {}
    for match in _PARAMETER.finditer(body):
        key = match.group(1).strip()
        if key in arguments:
            return f"parameter {key!r} is given twice"
        raw = match.group(2).removeprefix("\n").removesuffix("\n")
        arguments[key] = _typed(raw, properties.get(key) if isinstance(properties, Mapping) else None)
    rest = _PARAMETER.sub("", body)
    if "<parameter=" in rest or "</parameter>" in rest:
        return "an unclosed or stray <parameter> tag"
    if rest.strip():
        return f"text outside <parameter> tags: {rest.strip()[:40]!r}"
    return arguments


def parse_qwen3_xml(text: str, special: str, prefix: str, schemas: Schemas) -> ParsedTurn | None:
    if "<function=" not in text:
        return None
    starts = [i for i in (text.find("<tool_call>"), text.find("<function=")) if i >= 0]
    content = text[: min(starts)].strip() or None
    matches = list(_FUNCTION.finditer(text))
    if text.count("<function=") != len(matches) or text.count("</function>") != len(matches):
        return failed(text, "an unclosed or stray <function=...> tag", _FMT)
    if text.count("<tool_call>") != text.count("</tool_call>"):
        return failed(text, "an unclosed or stray <tool_call> tag", _FMT)
    calls: list[dict[str, Any]] = []
    for index, match in enumerate(matches):
        name = match.group(1).strip()
        if not name:
            return failed(text, f"tool call {index} has no function name", _FMT)
        arguments = _arguments(match.group(2), name, schemas)
        if isinstance(arguments, str):
            return failed(text, f"tool call {index} ({name}): {arguments}", _FMT)
        calls.append(make_call(name, arguments, index, prefix))
    return ParsedTurn(content=content, tool_calls=calls, format=_FMT)
