"""gpt-oss's harmony format: a turn is one or more messages, each `<|channel|>CHANNEL ... <|message|>
BODY` ended by `<|end|>`, `<|call|>` or `<|return|>`, later ones opened by `<|start|>assistant`.

A message whose header names a recipient `to=functions.NAME` (in the role part or after the channel,
both appear) is a call, its body the JSON arguments (`<|constrain|>json` may precede `<|message|>`);
the `final` channel (or a `commentary` message with no recipient) is the content, and `analysis` is
reasoning, kept out of the message. The driver's prompt ends with `<|start|>assistant`, so the first
message of a sampled turn starts at its `<|channel|>`.

Every marker is a special token: this parser reads the turn decoded with special tokens.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gym_trainer.toolcalls._base import ParsedTurn, Schemas, failed, make_call

__all__ = ["looks_harmony", "parse_harmony"]

_START, _MESSAGE = "<|start|>", "<|message|>"
_ENDS = re.compile(r"<\|(?:end|call|return)\|>")
_RECIPIENT = re.compile(r"\bto=functions\.([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")
_FMT = "harmony"


def looks_harmony(special: str) -> bool:
    return "<|channel|>" in special or _RECIPIENT.search(special) is not None


def _messages(special: str) -> list[tuple[str, str]] | str:
    """(header, body) pairs, or why the turn is not a sequence of harmony messages."""
    pairs: list[tuple[str, str]] = []
    rest = special.strip()
    while rest:
        rest = rest.removeprefix(_START)
        if _MESSAGE not in rest:
            return f"message {len(pairs)} has no <|message|>"
        header, rest = rest.split(_MESSAGE, 1)
        end = _ENDS.search(rest)
        body, rest = (rest[: end.start()], rest[end.end() :].strip()) if end else (rest, "")
        pairs.append((header, body))
        if rest and not rest.startswith(_START):
            return f"text after message {len(pairs) - 1}: {rest[:40]!r}"
    return pairs


def parse_harmony(text: str, special: str, prefix: str, schemas: Schemas) -> ParsedTurn | None:
    if not looks_harmony(special):
        return None
    pairs = _messages(special)
    if isinstance(pairs, str):
        return failed(text, pairs, _FMT)
    calls: list[dict[str, Any]] = []
    content: list[str] = []
    reasoning: list[str] = []
    for header, body in pairs:
        recipient = _RECIPIENT.search(header)
        channel = _CHANNEL.search(header)
        if recipient:
            name = recipient.group(1)
            try:
                arguments = json.loads(body) if body.strip() else {}
            except json.JSONDecodeError as exc:
                return failed(
                    text, f"tool call {len(calls)} ({name}): arguments are not JSON: {exc.msg}", _FMT
                )
            calls.append(make_call(name, arguments, len(calls), prefix))
        elif channel and channel.group(1) == "analysis":
            reasoning.append(body)
        else:
            content.append(body)
    return ParsedTurn(
        content="\n".join(content).strip() or None,
        tool_calls=calls,
        format=_FMT,
        reasoning="\n".join(reasoning).strip() or None,
    )
