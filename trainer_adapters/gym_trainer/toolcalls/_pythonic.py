"""Pythonic calls: a Python list of calls with keyword arguments, `[get_weather(city="Paris"), now()]`
(Llama 3.2 / 4's pythonic tool format, also what several small models write). Llama 4 may wrap the
list in `<|python_start|>` ... `<|python_end|>`.

The list is read with `ast`, never evaluated: arguments must be literals (strings, numbers, booleans,
None, lists, dicts). A positional argument or a non-literal value is a parse error.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from gym_trainer.toolcalls._base import ParsedTurn, Schemas, failed, make_call, strip_end

__all__ = ["looks_pythonic", "parse_pythonic"]

_SHAPE = re.compile(r"^\[\s*[A-Za-z_][\w.]*\s*\(.*\]$", re.DOTALL)  # cut or broken lists too
_START, _END = "<|python_start|>", "<|python_end|>"
_FMT = "pythonic"


def looks_pythonic(body: str) -> bool:
    return bool(_SHAPE.match(body.strip()))


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _name(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


def _call(node: ast.expr, index: int, prefix: str) -> dict[str, Any] | str:
    if not isinstance(node, ast.Call):
        return f"tool call {index} is not a call"
    name = _name(node.func)
    if name is None:
        return f"tool call {index} does not name a function"
    if node.args:
        return f"tool call {index} ({name}): positional arguments; use keyword arguments"
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return f"tool call {index} ({name}): **kwargs are not literal arguments"
        try:
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
        except ValueError:
            return f"tool call {index} ({name}): argument {keyword.arg!r} is not a literal"
    return make_call(name, arguments, index, prefix)


def parse_pythonic(text: str, special: str, prefix: str, schemas: Schemas) -> ParsedTurn | None:
    content: str | None = None
    if _START in special:
        head, body = special.split(_START, 1)
        content, body = head.strip() or None, strip_end(body).removesuffix(_END).strip()
    else:
        body = text.strip()
        if not looks_pythonic(body):
            return None
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError as exc:
        return failed(text, f"the calls are not a Python list: {exc.msg}", _FMT)
    if not isinstance(tree, ast.List) or not tree.elts:
        return failed(text, "the calls must be a non-empty Python list", _FMT)
    calls: list[dict[str, Any]] = []
    for index, node in enumerate(tree.elts):
        call = _call(node, index, prefix)
        if isinstance(call, str):
            return failed(text, call, _FMT)
        calls.append(call)
    return ParsedTurn(content=content, tool_calls=calls, format=_FMT)
