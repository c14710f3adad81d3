"""Rubrics: weighted means, gates that zero and skip, declared shaping, failures, and bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gym_verifiers import format as fmt
from gym_verifiers import numeric
from gym_verifiers.golden import check_golden, load_golden
from gym_verifiers.math import close_shared_pool
from gym_verifiers.result import Failure, VerifierResult
from gym_verifiers.rubric import (
    SHAPING_PREFIX,
    Criterion,
    CriterionKind,
    Rubric,
    RubricError,
    brevity,
    rubric_score,
)

RIGHT = "<answer>42</answer>"


@pytest.fixture(scope="module", autouse=True)
def _close_math_pool() -> Iterator[None]:
    yield
    close_shared_pool()


def standard() -> Rubric:
    return Rubric(
        [
            Criterion.gate("format", fmt.answer_tag_format),
            Criterion("correct", partial(numeric.numeric_match, reference="42"), weight=0.9),
            Criterion.shaping("brevity", partial(brevity, target_chars=40, max_chars=400), weight=0.1),
        ]
    )


async def test_weighted_mean_of_score_and_shaping_criteria() -> None:
    rubric = Rubric([Criterion("a", lambda _: 1.0, weight=3), Criterion("b", lambda _: 0.0, weight=1)])
    result = await rubric.score("anything")
    assert result.score == pytest.approx(0.75)
    assert result.components == {"a": 1.0, "b": 0.0}
    assert result.failure is None
    assert "a 1 (w 3)" in result.explanation and "b 0 (w 1)" in result.explanation


async def test_shaping_is_declared_and_droppable() -> None:
    long_right = "x" * 220 + RIGHT  # 239 characters: brevity (400 - 239) / 360
    result = await standard().score(long_right)
    shaping = (400 - len(long_right)) / 360
    assert result.components[SHAPING_PREFIX + "brevity"] == pytest.approx(shaping)
    assert result.score == pytest.approx(0.9 + 0.1 * shaping)
    assert result.unshaped_score == 1.0
    assert result.info["unshaped_reward"] == 1.0
    assert result.info["shaping"] == ["shaping/brevity"]
    assert result.info["gates"] == ["format"]
    assert result.info["criteria"]["brevity"]["kind"] == "shaping"
    sdk = result.to_verify_result(info={"task": "t1"})
    assert sdk.reward == result.score and sdk.info["unshaped_reward"] == 1.0 and sdk.info["task"] == "t1"
    assert sdk.components["correct"] == 1.0


async def test_a_failed_gate_zeroes_the_reward_and_skips_the_rest() -> None:
    calls: list[str] = []

    def expensive(response: str) -> float:
        calls.append(response)
        return 1.0

    rubric = Rubric([Criterion.gate("format", fmt.answer_tag_format), Criterion("judge", expensive)])
    result = await rubric.score("42")
    assert result.score == 0.0 and result.failure is None
    assert calls == []  # never paid for
    assert result.components == {"format": 0.0, "judge": 0.0}  # same keys as a passing response
    assert result.info["criteria"]["judge"]["skipped"] is True
    assert "gate format failed" in result.explanation
    passing = await rubric.score(RIGHT)
    assert passing.score == 1.0 and calls == [RIGHT]


async def test_a_gate_threshold_below_one() -> None:
    rubric = Rubric([Criterion.gate("half", lambda _: 0.5, threshold=0.5), Criterion("x", lambda _: 1.0)])
    assert (await rubric.score("")).score == 1.0
    strict = Rubric([Criterion.gate("half", lambda _: 0.5), Criterion("x", lambda _: 1.0)])
    assert (await strict.score("")).score == 0.0


async def test_an_undecided_criterion_makes_the_result_a_failure() -> None:
    def timed_out(_: str) -> VerifierResult:
        return VerifierResult.zero("slow", failure=Failure.VERIFY_TIMEOUT)

    rubric = Rubric([Criterion.gate("format", fmt.answer_tag_format), Criterion("math", timed_out)])
    result = await rubric.score(RIGHT)
    assert result.score == 0.0 and result.failure == "verify_timeout"
    assert "math (verify_timeout)" in result.explanation
    # ...unless a gate already failed cleanly: then 0 is an honest verdict.
    gated = await rubric.score("no tags")
    assert gated.failure is None and gated.score == 0.0


@pytest.mark.parametrize(
    "check",
    [
        lambda _: 1 / 0,
        lambda _: 1.5,
        lambda _: float("nan"),
        lambda _: "1.0",
        lambda _: True,
    ],
    ids=["raises", "above_one", "nan", "string", "bool"],
)
async def test_a_broken_check_is_a_crash_failure_not_an_exception(check: Any) -> None:
    result = await Rubric([Criterion("broken", check)]).score("x")
    assert result.score == 0.0 and result.failure == "verify_crashed"


async def test_async_checks_run_concurrently() -> None:
    started = asyncio.Event()

    async def first(_: str) -> float:
        started.set()
        await asyncio.sleep(0)
        return 1.0

    async def second(_: str) -> float:
        await asyncio.wait_for(started.wait(), 5)  # would deadlock if run one after the other in order
        return 0.5

    result = await Rubric([Criterion("b", second), Criterion("a", first)]).score("x")
    assert result.score == pytest.approx(0.75)
    assert list(result.components) == ["b", "a"]  # declared order, whatever the finishing order


async def test_duck_typed_results_keep_their_components() -> None:
    class Duck:
        score = 0.5
        components: ClassVar[dict[str, float]] = {"part": 0.5, "raw": -1.0}  # out-of-range ones dropped
        explanation = "half"
        failure = None

    result = await Rubric([Criterion("duck", lambda _: Duck())]).score("x")
    assert result.score == 0.5
    assert result.info["criteria"]["duck"]["components"] == {"part": 0.5}


@pytest.mark.parametrize(
    ("criteria", "message"),
    [
        ([Criterion("a", lambda _: 1.0), Criterion("a", lambda _: 1.0)], "repeat: a"),
        ([Criterion.gate("g", lambda _: 1.0)], "at least one score criterion"),
        ([Criterion("a", lambda _: 1.0, weight=0)], "at least one score criterion"),
        (
            [Criterion("a", lambda _: 1.0), Criterion.shaping("s", lambda _: 1.0, weight=1.0)],
            "shaping could outweigh",
        ),
    ],
)
def test_malformed_rubrics_fail_at_construction(criteria: list[Criterion], message: str) -> None:
    with pytest.raises(RubricError, match=message):
        Rubric(criteria)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "has space"},
        {"name": ""},
        {"weight": -1.0},
        {"weight": float("inf")},
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"check": "not callable"},
    ],
)
def test_malformed_criteria_fail_at_construction(kwargs: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {"name": "ok", "check": lambda _: 1.0, **kwargs}
    with pytest.raises(RubricError):
        Criterion(**arguments)


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"criteria": []},
        {"criteria": "format"},
        {"criteria": [["format"]]},
        {"criteria": [{"name": "x"}]},
        {"criteria": [{"name": "x", "verifier": "format.answer_tag_format", "colour": "red"}]},
        {"criteria": [{"name": "x", "verifier": "format.answer_tag_format", "kind": "bonus"}]},
        {"criteria": [{"name": "x", "verifier": "format.answer_tag_format", "kind": "gate", "weight": 1}]},
        {"criteria": [{"name": "x", "verifier": "text._scrub"}]},
    ],
)
async def test_malformed_specs_are_invalid_references(spec: dict[str, Any]) -> None:
    with pytest.raises(RubricError):
        Rubric.from_spec(spec)
    result = await rubric_score(spec, RIGHT)
    assert result.score == 0.0 and result.failure == "invalid_reference"


def test_spec_kinds_and_defaults() -> None:
    rubric = Rubric.from_spec(
        {
            "criteria": [
                {"name": "format", "verifier": "format.answer_tag_format", "kind": "gate"},
                {"name": "correct", "verifier": "text.exact_match", "args": {"reference": "42"}},
            ]
        }
    )
    kinds = [(c.name, c.kind, c.weight) for c in rubric.criteria]
    assert kinds == [("format", CriterionKind.GATE, 0.0), ("correct", CriterionKind.SCORE, 1.0)]
    assert "format:gate:0" in repr(rubric)


def test_brevity_is_linear_between_target_and_max() -> None:
    assert brevity("x" * 10, target_chars=10, max_chars=20).score == 1.0
    assert brevity("x" * 15, target_chars=10, max_chars=20).score == 0.5
    assert brevity("x" * 25, target_chars=10, max_chars=20).score == 0.0
    assert brevity("x", target_chars=20, max_chars=10).failure == "invalid_reference"


def test_rubric_golden_fixtures_cover_every_kind() -> None:
    cases = [case for case in load_golden() if case.file == "rubric.jsonl"]
    assert {case.kind for case in cases} >= {"full", "partial", "zero", "malformed", "hedged", "failure"}
    assert all(row.passed for row in check_golden(cases))


BAD_INPUTS = [
    "",
    "x" * 1_000_000,
    "<answer>" * 100_000,
    "\x00\x01\x02\xff\ud800",
    "<answer>４２</answer>",  # fullwidth digits: NFKC makes them 42
    "<answer>42</answer>" * 50,  # the same answer many times: one distinct answer, but 50 tags
    "<answer>1 or 2 or 42</answer>",
    "<answer>\\boxed{41} \\boxed{42}</answer>",
    "<answer>" + "{" * 10_000 + "</answer>",
]


@pytest.mark.parametrize("response", BAD_INPUTS, ids=range(len(BAD_INPUTS)))
async def test_bad_input_never_crashes_nor_beats_the_right_answer(response: str) -> None:
    rubric = standard()
    right = (await rubric.score(RIGHT)).score
    result = await rubric.score(response)
    assert result.failure is None
    assert 0.0 <= result.score <= right


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    response=st.lists(
        st.one_of(
            st.sampled_from(["<answer>", "</answer>", "42", "41", " or ", "<think>", "</think>", "\x00"]),
            st.text(st.characters(exclude_categories=()), max_size=8),
        ),
        max_size=20,
    ).map("".join)
)
def test_scores_stay_bounded_and_below_the_right_answer(response: str) -> None:
    async def both() -> tuple[float, float]:
        rubric = standard()
        return (await rubric.score(response)).score, (await rubric.score(RIGHT)).score

    score, right = asyncio.run(both())
    assert 0.0 <= score <= right == 1.0
