"""Replay every golden fixture twice: expected score, failure and components, deterministically."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gym_verifiers.golden import (
    FIXTURES_DIR,
    REQUIRED_KINDS,
    GoldenCase,
    GoldenFixtureError,
    check_golden,
    load_golden,
)
from gym_verifiers.math import close_shared_pool

CASES = load_golden()
OWN_MODULES = ("text", "numeric", "math", "choice", "format", "json_checks")


@pytest.fixture(scope="module", autouse=True)
def _close_math_pool() -> Iterator[None]:
    yield
    close_shared_pool()


@pytest.mark.parametrize("case", CASES, ids=[f"{case.file}:{case.name}" for case in CASES])
def test_golden_case(case: GoldenCase) -> None:
    (row,) = check_golden([case])
    assert row.passed, f"{case.where} {case.name}: {'; '.join(row.problems)}"
    assert row.deterministic
    assert row.result is not None and row.result["explanation"]


@pytest.mark.parametrize("module", OWN_MODULES)
def test_every_verifier_module_has_full_zero_and_malformed_cases(module: str) -> None:
    kinds = {case.kind for case in CASES if case.file == f"{module}.jsonl"}
    assert kinds >= REQUIRED_KINDS


def test_rows_serialize_for_the_cli() -> None:
    (row,) = check_golden([CASES[0]])
    assert json.loads(json.dumps(row.to_dict()))["passed"] is True


def test_a_wrong_expectation_is_reported_not_raised() -> None:
    case = GoldenCase(
        "x.jsonl", 1, "wrong", "full", "text.exact_match", {"response": "a", "reference": "b"}, 1.0
    )
    (row,) = check_golden([case])
    assert not row.passed
    assert "score 0.0 != expected 1.0" in row.problems[0]


def test_malformed_fixture_rows_are_rejected_with_their_location(tmp_path: Path) -> None:
    (tmp_path / "broken.jsonl").write_text('{"name": "x"}\n')
    with pytest.raises(GoldenFixtureError, match=r"broken\.jsonl:1"):
        load_golden(tmp_path)


def test_a_file_missing_a_required_kind_is_rejected(tmp_path: Path) -> None:
    line = {
        "name": "only_full",
        "kind": "full",
        "verifier": "text.exact_match",
        "args": {"response": "a", "reference": "a"},
        "expect": {"score": 1.0},
    }
    (tmp_path / "text.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(GoldenFixtureError, match="no malformed, zero case"):
        load_golden(tmp_path)


@pytest.mark.parametrize("verifier", ["os.system", "text._scrub", "..x.y", "golden.load_golden"])
def test_verifier_names_cannot_reach_outside_the_library(verifier: str) -> None:
    (row,) = check_golden([GoldenCase("x.jsonl", 1, "evil", "full", verifier, {}, 1.0)])
    assert not row.passed


def test_fixture_directory_is_the_package_folder() -> None:
    assert FIXTURES_DIR.name == "fixtures" and (FIXTURES_DIR / "math.jsonl").is_file()
