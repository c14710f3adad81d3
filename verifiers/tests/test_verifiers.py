"""Unit behaviour of the verifier core beyond the golden fixtures: the result type, extraction, parsing."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gym_server import VerifyResult
from gym_verifiers.choice import extract_choice
from gym_verifiers.format import extract_boxed, extract_tagged, final_answer, strip_math_delimiters
from gym_verifiers.json_checks import JSONNotFound, extract_json
from gym_verifiers.numeric import NumberError, parse_number
from gym_verifiers.result import Failure, VerifierResult
from gym_verifiers.text import normalize_text


@pytest.mark.parametrize("score", [-0.1, 1.5, float("nan"), float("inf")])
def test_result_rejects_scores_out_of_range(score: float) -> None:
    with pytest.raises(ValueError, match="finite number"):
        VerifierResult(score)


def test_result_rejects_bad_components_and_scored_failures() -> None:
    with pytest.raises(ValueError, match="component 'x'"):
        VerifierResult(1.0, {"x": 2.0})
    with pytest.raises(ValueError, match=r"must score 0\.0"):
        VerifierResult(0.5, failure=Failure.VERIFY_TIMEOUT)


def test_result_converts_to_the_sdk_shape() -> None:
    components = {"correct": 1.0}
    result = VerifierResult(1.0, components, "right")
    components["correct"] = 0.0  # the result keeps its own copy
    sdk = result.to_verify_result(components={"format": 1.0}, info={"answer": "42"})
    assert isinstance(sdk, VerifyResult)
    assert sdk.reward == 1.0 and sdk.failure is None
    assert sdk.components == {"correct": 1.0, "format": 1.0}
    assert sdk.info == {"explanation": "right", "answer": "42"}
    failed = VerifierResult.zero("slow", failure=Failure.VERIFY_TIMEOUT)
    assert failed.failure == "verify_timeout" and type(failed.failure) is str
    assert failed.to_verify_result().failure == "verify_timeout"
    assert failed.to_dict()["failure"] == "verify_timeout"


def test_boxed_extraction_handles_nesting_and_escapes() -> None:
    assert extract_boxed(r"\boxed{\frac{1}{2}} and \fbox{3}") == [r"\frac{1}{2}", "3"]
    assert extract_boxed(r"\boxed{\{1, 2\}}") == [r"\{1, 2\}"]
    assert extract_boxed(r"\boxed{\boxed{1}}") == [r"\boxed{1}"]  # only top-level boxes
    assert extract_boxed(r"\boxed{a \\{b} c}") == [r"a \\{b} c"]  # `\\` is a line break, `{b}` a group
    assert extract_boxed(r"\boxed{unclosed \boxed{2}") == ["2"]
    assert extract_boxed("no boxes") == []


def test_tag_extraction_pairs_tags_linearly() -> None:
    assert extract_tagged("<answer> 1 </answer><ANSWER>2</answer>") == ["1", "2"]
    assert extract_tagged("<answer>1<answer>2</answer>") == ["2"]
    assert extract_tagged("<answer>open") == []


def test_final_answer_priority_and_candidates() -> None:
    assert final_answer(r"<answer>1</answer> \boxed{2}").source == "boxed"
    assert final_answer("The answer is 3. <answer>4</answer>").text == "4"
    phrase = final_answer("So the final answer is: $\\frac{1}{2}$.")
    assert (phrase.text, phrase.source) == ("\\frac{1}{2}", "phrase")
    assert final_answer(r"\boxed{1} \boxed{ 1 } \boxed{2}").candidates == ("1", "2")
    assert final_answer("**Answer:** 7").text == "7"
    assert final_answer("nothing here").text is None


def test_strip_math_delimiters_keeps_escaped_dollars() -> None:
    assert strip_math_delimiters(r"$\$5$") == r"\$5"
    assert strip_math_delimiters(r"\(x+1\)") == "x+1"


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("  Hello,\tWORLD!  ", "hello world"),
        ("ＡＢＣ ﬁ", "abc fi"),
        ("\u0420\u0430ris", "paris"),
        ("Stra\u00dfe", "strasse"),
        ("a\x00b\u200bc\ud800", "abc"),
        ("line\nbreak", "line break"),
    ],
)
def test_normalize_text(raw: str, normalized: str) -> None:
    assert normalize_text(raw) == normalized


@pytest.mark.parametrize(
    ("written", "value", "percent"),
    [
        ("42", Fraction(42), False),
        ("-.5", Fraction(-1, 2), False),
        ("\u22123", Fraction(-3), False),
        ("1,234,567.5", Fraction(2469135, 2), False),
        ("1\u2009234", Fraction(1234), False),
        ("1{,}234", Fraction(1234), False),
        ("1'234", Fraction(1234), False),
        ("\\dfrac34", Fraction(3, 4), False),
        ("-\\frac{1}{3}", Fraction(-1, 3), False),
        ("2.5e3", Fraction(2500), False),
        ("2.5 \\times 10^{3}", Fraction(2500), False),
        ("12.5 percent", Fraction(1, 8), True),
        ("\\$1,000", Fraction(1000), False),
        ("x = 7.", Fraction(7), False),
    ],
)
def test_parse_number_accepts(written: str, value: Fraction, percent: bool) -> None:
    parsed = parse_number(written)
    assert (parsed.value, parsed.percent) == (value, percent)


@pytest.mark.parametrize(
    "written",
    ["1,5", "1 234", "1.234,5", "0,123", "3 or 4", "1.2.3", "inf", "nan", "1/0", "1e401", "", "seven"],
)
def test_parse_number_refuses_ambiguity(written: str) -> None:
    with pytest.raises(NumberError):
        parse_number(written)


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("(B)", "B"),
        ("B.", "B"),
        ("[C]", "C"),
        ("Final answer: **D**", "D"),
        ("I pick\n\nA) 42", "A"),
        ("The answer is B because it is larger.", "B"),
    ],
)
def test_extract_choice(response: str, letter: str) -> None:
    assert extract_choice(response).letter == letter


@pytest.mark.parametrize(
    "response", ["A or B", "Answer: (A), (C)", "A/B", "\\boxed{A}\\boxed{C}", "either a or b"]
)
def test_extract_choice_refuses_several_letters(response: str) -> None:
    choice = extract_choice(response)
    assert choice.letter is None and choice.hedged


def test_extract_json_sources() -> None:
    assert extract_json('{"a": 1}').source == "raw"
    assert extract_json("x\n```\n[1]\n```").value == [1]
    assert extract_json('first {"a": 1} then {"b": 2} end').value == {"b": 2}
    with pytest.raises(JSONNotFound, match="duplicate key"):
        extract_json('{"a": 1, "a": 2}')
    with pytest.raises(JSONNotFound):
        extract_json("Infinity")
