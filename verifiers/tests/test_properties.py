"""Properties of every verifier on arbitrary text: never raises, score and components always in [0, 1].

Inputs mix raw Unicode (NUL bytes and lone surrogates included) with the tokens the extractors look for,
so the shrinker reaches the interesting corners (unclosed boxes, nested tags, half a JSON fence).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gym_verifiers import choice, json_checks, numeric, text
from gym_verifiers import format as fmt
from gym_verifiers.format import MAX_TEXT_CHARS
from gym_verifiers.math import close_shared_pool, math_match_sync
from gym_verifiers.result import SCORE_MAX, SCORE_MIN, VerifierResult

TOKENS = [
    "\\boxed{", "\\fbox{", "}", "{", "\\{", "\\\\", "<answer>", "</answer>", "<think>", "</think>",
    "Answer:", "the answer is ", "final answer: ", " or ", "(B)", "A", "b.", "1,234", "3/4", "\\frac{1}{2}",
    "12%", "-", "1e5", "```json\n", "```", "[", "]", '{"a": ', "NaN", "\x00", "\ud800", "\u200b", "Р", "$",
    "\n", " ",
]  # fmt: skip
ANY_CHAR = st.characters(exclude_categories=())  # every code point, lone surrogates included
MIXED = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(ANY_CHAR, max_size=12)), max_size=40).map("".join)
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}

SYNC_VERIFIERS: dict[str, Callable[[str], VerifierResult]] = {
    "exact_match": lambda s: text.exact_match(s, "Paris"),
    "normalized_match": lambda s: text.normalized_match(s, ["Paris", "1/2"]),
    "numeric_match": lambda s: numeric.numeric_match(s, "1234", rel_tol=1e-6),
    "choice_match": lambda s: choice.choice_match(s, "B"),
    "answer_tag_format": fmt.answer_tag_format,
    "think_format": fmt.think_format,
    "regex_match": lambda s: fmt.regex_match(s, r"\d+(\.\d+)?"),
    "json_valid": json_checks.json_valid,
    "json_schema_match": lambda s: json_checks.json_schema_match(s, SCHEMA),
}


@pytest.fixture(scope="module", autouse=True)
def _close_math_pool() -> Iterator[None]:
    yield
    close_shared_pool()


def _assert_bounded(result: VerifierResult) -> None:
    assert SCORE_MIN <= result.score <= SCORE_MAX
    assert all(SCORE_MIN <= value <= SCORE_MAX for value in result.components.values())
    assert isinstance(result.explanation, str) and result.explanation
    assert result.failure is None or result.score == SCORE_MIN


@pytest.mark.parametrize("name", sorted(SYNC_VERIFIERS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=st.one_of(MIXED, st.text(ANY_CHAR)))
def test_sync_verifiers_are_total_and_bounded(name: str, response: str) -> None:
    first = SYNC_VERIFIERS[name](response)
    _assert_bounded(first)
    assert SYNC_VERIFIERS[name](response) == first  # deterministic


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=MIXED, reference=st.sampled_from(["1234", "\\frac{1}{2}", "x=3", "12\\%", "\\sqrt{2}"]))
def test_math_verifier_is_total_and_bounded(response: str, reference: str) -> None:
    _assert_bounded(math_match_sync(response, reference, timeout_s=5.0))


@settings(max_examples=100, deadline=None)
@given(value=st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=1000))
def test_numeric_parses_what_it_prints(value: object) -> None:
    assert numeric.parse_number(str(value)).value == value


@pytest.mark.parametrize("name", sorted(SYNC_VERIFIERS))
@pytest.mark.parametrize(
    "huge",
    [
        "x" * MAX_TEXT_CHARS,
        "\\boxed{" * (MAX_TEXT_CHARS // 7),
        "{" * MAX_TEXT_CHARS,
        "<answer>" * (MAX_TEXT_CHARS // 8),
        "1," * (MAX_TEXT_CHARS // 2),
        "\u0440" * MAX_TEXT_CHARS,
        "x" * (MAX_TEXT_CHARS + 1),
    ],
    ids=["letters", "boxes", "braces", "tags", "digits", "cyrillic", "over_limit"],
)
def test_huge_inputs_finish_quickly(name: str, huge: str) -> None:
    started = time.monotonic()
    _assert_bounded(SYNC_VERIFIERS[name](huge))
    assert time.monotonic() - started < 10.0  # generous: the 2-core CI box is shared; typical is < 0.5 s
