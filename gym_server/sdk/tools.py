"""The `@tool` decorator: an environment method becomes a tool with an OpenAI function schema.

The schema comes from the type hints (through a pydantic model, which also validates the arguments)
and from the docstring (its first paragraph describes the tool, its `Args:` section the parameters).
Calling a tool never raises to the caller: bad JSON, a wrong argument or an exception inside the tool
all come back as text the model reads, because a model's mistake is training signal, not a server error.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, get_type_hints, overload

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

__all__ = ["ToolError", "ToolSpec", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


class ToolError(Exception):
    """Raise inside a tool to send the model a clean error message (no exception type shown)."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool's name, schema, argument model and the function behind it."""

    name: str
    description: str
    arguments: type[BaseModel]
    function: Callable[..., Any]
    openai_schema: dict[str, Any]  # built once: sessions hand it out on every creation (treat as read-only)

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> ToolSpec:
        tool_name = name or fn.__name__
        if not TOOL_NAME.match(tool_name):
            raise ValueError(
                f"tool name {tool_name!r} must start with a letter; letters, digits, '_', '-'; 64 at most"
            )
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        hints = get_type_hints(fn, include_extras=True)
        fields: dict[str, Any] = {}
        for index, param in enumerate(inspect.signature(fn).parameters.values()):
            if index == 0 and param.name == "self":
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ValueError(f"tool {tool_name!r}: *args and **kwargs cannot be described to a model")
            if param.name not in hints:
                raise ValueError(f"tool {tool_name!r}: parameter {param.name!r} needs a type hint")
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (hints[param.name], default)
        model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        for field_name, text in arg_docs.items():
            if field_name in model.model_fields:
                model.model_fields[field_name].description = text
        model.model_rebuild(force=True)
        parameters = _strip_titles(model.model_json_schema())
        parameters.setdefault("properties", {})
        schema = {
            "type": "function",
            "function": {"name": tool_name, "description": summary, "parameters": parameters},
        }
        return cls(name=tool_name, description=summary, arguments=model, function=fn, openai_schema=schema)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool (shared; do not mutate)."""
        return self.openai_schema

    async def invoke(
        self, owner: object, arguments: str | dict[str, Any], timeout_s: float
    ) -> tuple[str, bool]:
        """Run the tool on `owner` and return `(text for the model, ok)`; never raises.

        `timeout_s` bounds the call and becomes a "timed out" tool message; `math.inf` means the caller
        bounds the whole step instead (the server does, so a hung tool is an environment fault).
        """
        try:
            raw = orjson.loads(arguments or "{}") if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError as exc:
            return f"Error: arguments for {self.name!r} are not valid JSON ({exc}).", False
        if not isinstance(raw, dict):
            return (
                f"Error: arguments for {self.name!r} must be a JSON object, got {type(raw).__name__}.",
                False,
            )
        try:
            validated = self.arguments.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
            )
            return f"Error: invalid arguments for {self.name!r}: {problems}.", False
        kwargs = dict(validated)  # the declared fields only: the argument model forbids extras
        try:
            result = self.function(owner, **kwargs)
            if inspect.isawaitable(result):
                if math.isinf(timeout_s):  # the caller holds a deadline over the whole step
                    result = await result
                else:
                    async with asyncio.timeout(timeout_s):
                        result = await result
        except ToolError as exc:
            return f"Error: {exc}", False
        except TimeoutError:
            return f"Error: tool {self.name!r} timed out after {timeout_s:g} s.", False
        except Exception as exc:  # an author's bug must not end the episode or reach HTTP
            return f"Error: tool {self.name!r} failed: {type(exc).__name__}: {exc}", False
        return _render(result), True


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(*, name: str | None = None) -> Callable[[F], F]: ...


def tool(fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Mark an environment method as a tool the model may call.

    Example:
        ```python
        class Calculator(Environment):
            @tool
            async def add(self, a: int, b: int) -> int:
                \"\"\"Add two integers.

                Args:
                    a: the first addend
                    b: the second addend
                \"\"\"
                return a + b
        ```
    """

    def mark(function: F) -> F:
        function.__gym_tool__ = ToolSpec.from_function(function, name)  # type: ignore[attr-defined]
        return function

    return mark(fn) if fn is not None else mark


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    summary_lines: list[str] = []
    arg_docs: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in doc.splitlines():
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if in_args:
            match = _ARG_LINE.match(line)
            if match:
                current = match.group(1)
                arg_docs[current] = match.group(2).strip()
            elif line.strip() and current and line.startswith((" ", "\t")):
                arg_docs[current] += " " + line.strip()
            elif line.strip():
                in_args = False
        elif not line.strip() and summary_lines:
            in_args = False
            summary_lines.append("\n")
        elif not arg_docs:
            summary_lines.append(line.strip())
    summary = " ".join(summary_lines).split("\n")[0].strip()
    return summary, arg_docs


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _render(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    try:
        return orjson.dumps(result, default=str).decode()
    except TypeError:
        return str(result)
