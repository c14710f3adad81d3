"""What a task template produces: a request and the calls that fulfil it.

Templates live in `intents_personal.py` and `intents_world.py`; `generate.py` turns drafts into tasks
by adding the offered tools (the family's tools plus distractors) and a stable id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import Any

from gym_verifiers.tool_call import ExpectedCall

__all__ = ["Draft", "Intent", "call"]


@dataclass(frozen=True, slots=True)
class Draft:
    """One generated request: its tool family, the user's words and the expected calls."""

    family: str
    prompt: str
    calls: tuple[ExpectedCall, ...]


Intent = Callable[[Random], Draft]
"""A template: draws slots and wording from the generator's `Random` and returns a `Draft`."""


def call(
    name: str,
    arguments: dict[str, Any],
    *,
    unordered: tuple[str, ...] = (),
    optional: dict[str, Any] | None = None,
    contains: dict[str, list[str]] | None = None,
) -> ExpectedCall:
    """An expected call; `optional` maps keys the request left unsaid to the tool default they mean."""
    return ExpectedCall(
        name=name,
        arguments={**arguments, **(optional or {})},
        unordered=list(unordered),
        optional=list(optional or {}),
        contains=contains or {},
    )
