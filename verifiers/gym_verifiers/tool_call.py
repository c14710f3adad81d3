"""Tool-call verification: read the calls an assistant message makes, then score them against expected calls.

Models emit tool calls in several shapes, and an RL reward must not depend on which one a chat template
happens to produce. `parse_tool_calls` reads, in order of precedence:

1. the OpenAI `tool_calls` list of the message (`{"function": {"name", "arguments"}}`, arguments a JSON
   string or an object);
2. Hermes/Qwen `<tool_call>{...}</tool_call>` blocks in the content (an unclosed last block counts);
3. fenced code blocks (```` ```json ```` or bare ```` ``` ````) in the content;
4. the whole content, when it is a bare JSON object or list (after a Mistral `[TOOL_CALLS]` marker, if any).

Each call object is `{"name", "arguments"}`, `{"name", "parameters"}` or the OpenAI `{"function": {...}}`
form; a list holds several calls. Arguments given as a JSON string are decoded once.

`score_tool_calls` matches found calls to expected calls without regard to order: only calls of the same
name pair up, greedily by descending argument score (optimal unless two calls compete for one best
partner with crossed second choices). With `D = max(expected calls, calls found)`, where malformed calls
count as found so that spraying calls never pays:

| component | value |
|---|---|
| `name` | expected calls matched by a call of the same name, divided by `D` |
| `arguments` | sum of the matched pairs' argument scores, divided by `D` |
| `score` | `(name + arguments) / 2`, in [0, 1]; 1.0 when nothing is expected and nothing is called |

An argument score is per key: each expected key scores 1 when its value matches (strings after case
folding and whitespace collapsing, numbers by value so `2 == 2.0`, booleans and null exactly, objects key
by key, lists in order or as multisets for keys declared `unordered`), a `contains` key scores the share
of its keywords found in the text, and each unexpected key adds a 0 to the mean. A key listed `optional`
may be left out at no cost (the tool's default is what was wanted) but still scores when given.

The module is pure and never raises on model output: anything that is not a readable call is counted as
malformed and explained. A malformed *expected* spec is an author's bug and fails validation loudly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "MAX_CALLS",
    "CallMatch",
    "ExpectedCall",
    "ParseResult",
    "ParsedCall",
    "ToolCallScore",
    "argument_score",
    "normalise_text",
    "parse_tool_calls",
    "score_tool_calls",
    "value_score",
    "verify_tool_calls",
]

MAX_CALLS = 128
"""Calls kept per message; further well-formed calls are only counted, which bounds the matching work."""

_MAX_ERRORS = 5
_MAX_MISMATCHED = 8
_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_MISTRAL = "[TOOL_CALLS]"
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)

Source = Literal["tool_calls", "hermes", "fenced", "content", "none"]


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One readable tool call: a name and its decoded arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(slots=True)
class ParseResult:
    """The calls of one message, with what could not be read.

    Attributes:
        calls: the readable calls, at most `MAX_CALLS`.
        malformed: call-shaped things that could not be read (bad JSON, no name, non-object arguments).
        dropped: readable calls beyond `MAX_CALLS`, counted but not kept.
        source: where the calls were found.
        errors: the first few problems, for the explanation.
    """

    calls: list[ParsedCall] = field(default_factory=list)
    malformed: int = 0
    dropped: int = 0
    source: Source = "none"
    errors: list[str] = field(default_factory=list)

    @property
    def found(self) -> int:
        """Every call the message attempted, readable or not."""
        return len(self.calls) + self.malformed + self.dropped

    @property
    def parsed(self) -> bool:
        """Whether at least one call could be read."""
        return bool(self.calls)

    def _add(self, item: object) -> None:
        call = _call_from_object(item)
        if isinstance(call, str):
            self._fail(call)
        elif len(self.calls) >= MAX_CALLS:
            self.dropped += 1
        else:
            self.calls.append(call)

    def _fail(self, problem: str) -> None:
        self.malformed += 1
        if len(self.errors) < _MAX_ERRORS:
            self.errors.append(problem)


class ExpectedCall(BaseModel):
    """A call the model should make, with how its arguments are compared.

    Attributes:
        name: the tool name, compared exactly.
        arguments: expected values by key.
        unordered: keys whose list values compare as multisets.
        optional: keys of `arguments` the model may omit (the tool default is the expected value).
        contains: free-text keys scored by the share of these keywords found in the value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    unordered: list[str] = Field(default_factory=list)
    optional: list[str] = Field(default_factory=list)
    contains: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> ExpectedCall:
        for label, keys in (("unordered", self.unordered), ("optional", self.optional)):
            unknown = set(keys) - set(self.arguments)
            if unknown:
                raise ValueError(f"{label} keys {sorted(unknown)} are not in arguments")
        overlap = set(self.contains) & set(self.arguments)
        if overlap:
            raise ValueError(f"keys {sorted(overlap)} are both in arguments and contains")
        if any(not keywords for keywords in self.contains.values()):
            raise ValueError("every contains key needs at least one keyword")
        return self


class CallMatch(BaseModel):
    """An expected call paired with the found call that serves it."""

    expected: int = Field(description="index into the expected calls")
    found: int = Field(description="index into the readable calls")
    arguments: float = Field(ge=0.0, le=1.0)
    mismatched: list[str] = Field(default_factory=list, description="keys not fully matched (first few)")


class ToolCallScore(BaseModel):
    """The verdict on one message: a score in [0, 1], its components and a readable explanation."""

    score: float = Field(ge=0.0, le=1.0)
    parsed: bool = Field(description="at least one call could be read")
    components: dict[str, float] = Field(description="`name` and `arguments`, each in [0, 1]")
    matches: list[CallMatch] = Field(default_factory=list)
    expected_calls: int
    found_calls: int
    malformed_calls: int
    source: Source
    explanation: str


def normalise_text(text: str) -> str:
    """Case-folded with runs of whitespace collapsed to one space and the ends trimmed."""
    return " ".join(text.split()).casefold()


def parse_tool_calls(message: object) -> ParseResult:
    """Read the tool calls of an assistant message (a dict in OpenAI form) or of a raw completion string."""
    if isinstance(message, Mapping):
        raw_calls = message.get("tool_calls")
        if isinstance(raw_calls, list) and raw_calls:
            result = ParseResult(source="tool_calls")
            for item in raw_calls:
                result._add(item)
            return result
        content = _content_text(message.get("content"))
    elif isinstance(message, str):
        content = message
    else:
        return ParseResult(errors=[f"not a message: {type(message).__name__}"])
    return _parse_content(content)


def value_score(actual: Any, expected: Any, *, unordered: bool = False) -> float:
    """How well one value matches an expected JSON value, in [0, 1]; objects and lists earn partial credit."""
    if isinstance(expected, bool) or expected is None:
        return float(type(actual) is type(expected) and actual == expected)
    if isinstance(expected, int | float):
        return float(_is_number(actual) and _numbers_equal(actual, expected))
    if isinstance(expected, str):
        return float(isinstance(actual, str) and normalise_text(actual) == normalise_text(expected))
    if isinstance(expected, Mapping):
        return _mapping_score(actual, expected) if isinstance(actual, Mapping) else 0.0
    if isinstance(expected, list | tuple):
        if not isinstance(actual, list | tuple):
            return 0.0
        return _multiset_score(actual, expected) if unordered else _sequence_score(actual, expected)
    return 0.0  # JSON has no other types


def argument_score(arguments: Mapping[str, Any], expected: ExpectedCall) -> tuple[float, list[str]]:
    """The per-key mean match of one call's arguments, and the keys that did not fully match (first few)."""
    total = 0.0
    weight = 0
    mismatched: list[str] = []
    for key, want in expected.arguments.items():
        if key not in arguments and key in expected.optional:
            continue
        weight += 1
        score = 0.0
        if key in arguments:
            score = value_score(arguments[key], want, unordered=key in expected.unordered)
        total += score
        if score < 1.0:
            mismatched.append(key)
    for key, keywords in expected.contains.items():
        weight += 1
        score = _keyword_score(arguments.get(key), keywords)
        total += score
        if score < 1.0:
            mismatched.append(key)
    extras = [key for key in arguments if key not in expected.arguments and key not in expected.contains]
    weight += len(extras)
    mismatched.extend(extras[:_MAX_MISMATCHED])
    return (min(1.0, total / weight) if weight else 1.0), [key[:40] for key in mismatched[:_MAX_MISMATCHED]]


def score_tool_calls(parsed: ParseResult, expected: Sequence[ExpectedCall]) -> ToolCallScore:
    """Score the calls of a message against the expected calls, order-insensitively (see the module doc)."""
    pairs: list[tuple[float, int, int, list[str]]] = []
    for i, want in enumerate(expected):
        for j, call in enumerate(parsed.calls):
            if call.name == want.name:
                score, mismatched = argument_score(call.arguments, want)
                pairs.append((score, i, j, mismatched))
    pairs.sort(key=lambda pair: (-pair[0], pair[1], pair[2]))
    matches: list[CallMatch] = []
    used_expected: set[int] = set()
    used_found: set[int] = set()
    for score, i, j, mismatched in pairs:
        if i not in used_expected and j not in used_found:
            used_expected.add(i)
            used_found.add(j)
            matches.append(CallMatch(expected=i, found=j, arguments=score, mismatched=mismatched))
    matches.sort(key=lambda match: match.expected)
    denominator = max(len(expected), parsed.found)
    if denominator == 0:
        name_part = arguments_part = 1.0
    else:  # clamped: float sums must not step outside the documented range
        name_part = min(1.0, len(matches) / denominator)
        arguments_part = min(1.0, sum(match.arguments for match in matches) / denominator)
    return ToolCallScore(
        score=(name_part + arguments_part) / 2,
        parsed=parsed.parsed,
        components={"name": name_part, "arguments": arguments_part},
        matches=matches,
        expected_calls=len(expected),
        found_calls=parsed.found,
        malformed_calls=parsed.malformed,
        source=parsed.source,
        explanation=_explain(parsed, expected, matches),
    )


def verify_tool_calls(message: object, expected: Sequence[ExpectedCall | Mapping[str, Any]]) -> ToolCallScore:
    """Parse `message` and score it against `expected` (specs or their JSON form) in one call.

    Example:
        ```python
        message = {"role": "assistant", "content": '<tool_call>{"name": "get_weather", '
                   '"arguments": {"city": " paris "}}</tool_call>'}
        result = verify_tool_calls(message, [{"name": "get_weather", "arguments": {"city": "Paris"}}])
        assert result.score == 1.0
        ```
    """
    specs = [_spec(item) for item in expected]
    return score_tool_calls(parse_tool_calls(message), specs)


def _spec(item: ExpectedCall | Mapping[str, Any]) -> ExpectedCall:
    return item if isinstance(item, ExpectedCall) else ExpectedCall.model_validate(item)


# -- parsing -------------------------------------------------------------------------------------


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        texts = (part.get("text") for part in content if isinstance(part, Mapping))
        return "".join(text for text in texts if isinstance(text, str))
    return ""


def _parse_content(content: str) -> ParseResult:
    blocks = _HERMES.findall(content)
    source: Source = "hermes"
    if not blocks:
        blocks, source = _FENCE.findall(content), "fenced"
    if not blocks:
        stripped = content.strip().removeprefix(_MISTRAL).lstrip()
        if not stripped.startswith(("{", "[")):
            return ParseResult(errors=["no tool call found in the message"])
        blocks, source = [stripped], "content"
    result = ParseResult(source=source)
    for number, block in enumerate(blocks, start=1):
        try:
            decoded = orjson.loads(block.strip())
        except orjson.JSONDecodeError as exc:
            result._fail(f"{source} block {number}: invalid JSON ({_short(str(exc), 80)})")
            continue
        for item in decoded if isinstance(decoded, list) else [decoded]:
            result._add(item)
    return result


def _call_from_object(item: object) -> ParsedCall | str:
    """A readable call, or the reason this object is not one."""
    if not isinstance(item, Mapping):
        return f"a call must be a JSON object, got {type(item).__name__}"
    function = item.get("function")
    source: Mapping[Any, Any] = function if isinstance(function, Mapping) else item
    name = source.get("name")
    if not isinstance(name, str) or not name.strip():
        return "a call has no tool name"
    arguments = source.get("arguments", source.get("parameters", {}))
    if isinstance(arguments, str):
        if not arguments.strip():
            arguments = {}
        else:
            try:
                arguments = orjson.loads(arguments)
            except orjson.JSONDecodeError as exc:
                return f"arguments of {_short(name, 40)} are not valid JSON ({_short(str(exc), 80)})"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return f"arguments of {_short(name, 40)} must be a JSON object, got {type(arguments).__name__}"
    return ParsedCall(name=name, arguments={str(key): value for key, value in arguments.items()})


# -- comparing -----------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers_equal(a: float, b: float) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except OverflowError:  # an integer too large for a float equals no float we expect
        return False


def _mapping_score(actual: Mapping[Any, Any], expected: Mapping[Any, Any]) -> float:
    keys = set(expected) | set(actual)
    if not keys:
        return 1.0
    total = sum(value_score(actual[key], want) for key, want in expected.items() if key in actual)
    return total / len(keys)


def _sequence_score(actual: Sequence[Any], expected: Sequence[Any]) -> float:
    longest = max(len(actual), len(expected))
    if longest == 0:
        return 1.0
    return sum(value_score(got, want) for got, want in zip(actual, expected, strict=False)) / longest


def _multiset_score(actual: Sequence[Any], expected: Sequence[Any]) -> float:
    longest = max(len(actual), len(expected))
    if longest == 0:
        return 1.0
    remaining = list(actual)
    hits = 0
    for want in expected:
        for index, got in enumerate(remaining):
            if value_score(got, want) == 1.0:
                del remaining[index]
                hits += 1
                break
    return hits / longest


def _keyword_score(value: object, keywords: Sequence[str]) -> float:
    if not isinstance(value, str):
        return 0.0
    text = normalise_text(value)
    return sum(normalise_text(keyword) in text for keyword in keywords) / len(keywords)


# -- explaining ----------------------------------------------------------------------------------


def _short(text: str, limit: int) -> str:
    """A printable, bounded rendering of model-controlled text for explanations."""
    shown = repr(text[:limit])
    return shown if len(text) <= limit else shown + "…"


def _explain(parsed: ParseResult, expected: Sequence[ExpectedCall], matches: Sequence[CallMatch]) -> str:
    parts = [f"{parsed.found} call(s) found via {parsed.source}, {len(expected)} expected"]
    if parsed.malformed:
        parts.append(f"{parsed.malformed} malformed")
    if parsed.dropped:
        parts.append(f"{parsed.dropped} beyond the first {MAX_CALLS} not examined")
    by_expected = {match.expected: match for match in matches}
    for index, want in enumerate(expected):
        match = by_expected.get(index)
        if match is None:
            parts.append(f"{want.name}: no matching call")
        elif match.mismatched:
            mismatched = ", ".join(_short(key, 40) for key in match.mismatched)
            parts.append(f"{want.name}: arguments {match.arguments:.2f}, mismatched {mismatched}")
        else:
            parts.append(f"{want.name}: exact")
    parts.extend(parsed.errors)
    return "; ".join(parts)
