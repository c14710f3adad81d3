"""The one result type every verifier in this library returns, and the failure classes it may carry.

A verifier answers three questions at once: how good the response is (`score`, always in
[`SCORE_MIN`, `SCORE_MAX`] = [0, 1]), why (`components`, each also in [0, 1], and a one-line
`explanation` a person can read in a trajectory viewer), and whether the score may be trained on at all
(`failure`). A failure means the *verifier* could not decide (it timed out, crashed, or the task's own
reference is broken); such a score is 0 but must be filtered out by the trainer, not learned from. A
model's wrong, malformed or hedged answer is never a failure: it is an honest 0 with an explanation.

`VerifierResult.to_verify_result()` turns it into the SDK's `gym_server.VerifyResult`, the shape the HTTP
API and the trajectory store speak.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gym_server.sdk.environment import VerifyResult

__all__ = ["SCORE_MAX", "SCORE_MIN", "Failure", "VerifierResult"]

SCORE_MIN = 0.0
SCORE_MAX = 1.0


class Failure(StrEnum):
    """Why a verifier could not decide; a result carrying one must not be trained on."""

    VERIFY_TIMEOUT = "verify_timeout"  # the check ran past its wall-clock limit and was killed
    VERIFY_CRASHED = "verify_crashed"  # the worker process running the check died or the pool closed
    INVALID_REFERENCE = "invalid_reference"  # the task's reference answer, schema or pattern is unusable


@dataclass(frozen=True, slots=True)
class VerifierResult:
    """A bounded score with its components, a human-readable explanation and an optional failure class.

    Example:
        ```python
        result = VerifierResult(1.0, {"correct": 1.0}, "42 equals the reference 42")
        assert result.to_verify_result().reward == 1.0
        ```

    Raises:
        ValueError: at construction, when the score or a component is outside [0, 1] or not finite, or a
            failure comes with a non-zero score (a verifier bug, so it fails loudly).
    """

    score: float
    components: Mapping[str, float] = field(default_factory=dict)
    explanation: str = ""
    failure: str | None = None

    def __post_init__(self) -> None:
        _check_bounded("score", self.score)
        for name, value in self.components.items():
            _check_bounded(f"component {name!r}", value)
        if self.failure is not None and self.score != SCORE_MIN:
            raise ValueError(
                f"a result with failure {self.failure!r} must score {SCORE_MIN}, not {self.score}"
            )
        # Copy the components (a caller's dict must not change a stored result) and store plain types.
        object.__setattr__(self, "components", {name: float(v) for name, v in self.components.items()})
        if self.failure is not None:
            object.__setattr__(self, "failure", str(self.failure))

    @classmethod
    def zero(
        cls, explanation: str, components: Mapping[str, float] | None = None, failure: str | None = None
    ) -> VerifierResult:
        """A score of 0: a wrong answer, or (with `failure`) a check that could not decide."""
        return cls(SCORE_MIN, dict(components or {}), explanation, failure)

    @classmethod
    def binary(
        cls, passed: bool, explanation: str, components: Mapping[str, float] | None = None
    ) -> VerifierResult:
        """1.0 when `passed`, else 0.0."""
        return cls(SCORE_MAX if passed else SCORE_MIN, dict(components or {}), explanation)

    @property
    def passed(self) -> bool:
        """Whether the score is full marks."""
        return self.score >= SCORE_MAX

    def to_verify_result(
        self, *, components: Mapping[str, float] | None = None, info: Mapping[str, Any] | None = None
    ) -> VerifyResult:
        """The SDK's `VerifyResult`: reward = score; extra components and info are merged in."""
        merged_info: dict[str, Any] = {"explanation": self.explanation}
        merged_info.update(info or {})
        return VerifyResult(
            reward=self.score,
            components={**self.components, **(components or {})},
            info=merged_info,
            failure=self.failure,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (golden fixtures and reports compare these)."""
        return {
            "score": self.score,
            "components": dict(self.components),
            "explanation": self.explanation,
            "failure": self.failure,
        }


def _check_bounded(what: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not SCORE_MIN <= value <= SCORE_MAX:
        raise ValueError(f"{what} must be a finite number in [{SCORE_MIN}, {SCORE_MAX}], got {value!r}")
