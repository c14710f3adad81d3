"""The functions a generated package is made of: a correct body, a plausible bug, and inputs to test.

Each `Template` is one small function. `inputs(rng)` draws argument tuples; the generator computes every
expected value by running the *correct* body, and keeps only tasks where the buggy body fails at least
one visible and one hidden case. Bugs are the kind people write: off-by-one ranges, a missed rule, the
wrong branch, forgotten case folding, an unguarded edge.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SIGNATURES", "TEMPLATES", "Template"]


@dataclass(frozen=True, slots=True)
class Template:
    """One function: its name, docstring, correct and buggy source, and an input sampler."""

    name: str
    doc: str
    correct: str
    buggy: str
    inputs: Callable[[random.Random], list[tuple[Any, ...]]]


def _ints(rng: random.Random, count: int, low: int = -20, high: int = 40) -> list[int]:
    return [rng.randint(low, high) for _ in range(count)]


def _words(rng: random.Random) -> str:
    pool = ["Alpha", "beta", "Gamma", "delta", "ECHO", "fox", "Iris", "umbra", "Oak", "sky"]
    return " ".join(rng.choice(pool) for _ in range(rng.randint(2, 5)))


TEMPLATES: list[Template] = [
    Template(
        "clamp",
        "Limit value to the closed range [low, high].",
        "    if value < low:\n        return low\n    if value > high:\n        return high\n"
        "    return value\n",
        "    if value < low:\n        return low\n    if value > high:\n        return low\n"
        "    return value\n",
        lambda rng: (
            [(v, 0, 10) for v in [rng.randint(11, 30), rng.randint(-9, -1), rng.randint(0, 10)]]
            + [(rng.randint(12, 50), 5, 12)]
        ),
    ),
    Template(
        "running_total",
        "Cumulative sums: running_total([1, 2, 3]) == [1, 3, 6].",
        "    out, total = [], 0\n    for value in values:\n        total += value\n"
        "        out.append(total)\n    return out\n",
        "    out, total = [], 0\n    for index in range(1, len(values)):\n        total += values[index]\n"
        "        out.append(total)\n    return out\n",
        lambda rng: [(_ints(rng, rng.randint(2, 6)),) for _ in range(3)] + [([],)],
    ),
    Template(
        "chunk",
        "Split items into lists of `size` items; the last one may be shorter.",
        "    return [items[i : i + size] for i in range(0, len(items), size)]\n",
        "    return [items[i : i + size] for i in range(0, len(items) - size, size)]\n",
        lambda rng: [(_ints(rng, rng.randint(5, 11)), rng.randint(2, 4)) for _ in range(3)] + [([1, 2], 5)],
    ),
    Template(
        "slugify",
        "Lower-case words joined by hyphens: slugify('Hello  World') == 'hello-world'.",
        "    return '-'.join(text.lower().split())\n",
        "    return '-'.join(text.split())\n",
        lambda rng: [(_words(rng),) for _ in range(3)] + [("  Mixed   CASE  ",)],
    ),
    Template(
        "is_leap",
        "Whether a Gregorian year is a leap year.",
        "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
        "    return year % 4 == 0 and year % 100 != 0\n",
        lambda rng: (
            [
                (rng.choice([1600, 2000, 2400]),),
                (rng.choice([1900, 2100]),),
                (rng.randrange(1904, 2096, 4),),
                (rng.randrange(1901, 2099, 2),),
            ]
        ),
    ),
    Template(
        "median",
        "The median of a non-empty list of numbers (the mean of the two middle ones for an even count).",
        "    ordered = sorted(values)\n    middle = len(ordered) // 2\n    if len(ordered) % 2:\n"
        "        return ordered[middle]\n    return (ordered[middle - 1] + ordered[middle]) / 2\n",
        "    ordered = sorted(values)\n    middle = len(ordered) // 2\n    return ordered[middle]\n",
        lambda rng: [(_ints(rng, 4),), (_ints(rng, 5),), (_ints(rng, 6),), ([3, 1],)],
    ),
    Template(
        "count_vowels",
        "How many letters of text are vowels (a, e, i, o, u, in either case).",
        "    return sum(1 for char in text.lower() if char in 'aeiou')\n",
        "    return sum(1 for char in text if char in 'aeiou')\n",
        lambda rng: [(_words(rng),) for _ in range(3)] + [("AEIOU aeiou",)],
    ),
    Template(
        "rotate",
        "Rotate items left by k places (k may exceed the length): rotate([1, 2, 3], 1) == [2, 3, 1].",
        "    if not items:\n        return []\n    k %= len(items)\n    return items[k:] + items[:k]\n",
        "    if not items:\n        return []\n    return items[k:] + items[:k]\n",
        lambda rng: (
            [
                (_ints(rng, 5), rng.randint(6, 12)),
                (_ints(rng, 4), rng.randint(1, 3)),
                ([], 3),
                (_ints(rng, 3), rng.randint(4, 9)),
            ]
        ),
    ),
    Template(
        "word_count",
        "How many whitespace-separated words text holds.",
        "    return len(text.split())\n",
        "    return len(text.split(' '))\n",
        lambda rng: [(f"  {_words(rng)}  ",), (_words(rng).replace(" ", "  "),), ("",), ("one",)],
    ),
    Template(
        "dedupe",
        "Items without repeats, in the order of their first appearance.",
        "    seen, out = set(), []\n    for item in items:\n        if item not in seen:\n"
        "            seen.add(item)\n            out.append(item)\n    return out\n",
        "    return sorted(set(items))\n",
        lambda rng: [(_ints(rng, rng.randint(5, 9), 0, 6),) for _ in range(3)] + [([3, 1, 3],)],
    ),
]

SIGNATURES = {
    "clamp": "value, low, high",
    "running_total": "values",
    "chunk": "items, size",
    "slugify": "text",
    "is_leap": "year",
    "median": "values",
    "count_vowels": "text",
    "rotate": "items, k",
    "word_count": "text",
    "dedupe": "items",
}
"""Each template's parameter list, as written in the generated source."""
