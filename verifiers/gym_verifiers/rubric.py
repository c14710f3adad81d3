"""Rubrics: one reward from several named checks, with gates and declared shaping terms.

A `Rubric` is a list of `Criterion`s, each a check of the response (any verifier of this library, an
LLM judge, or a plain function returning a float in [0, 1]) with a name, a kind and a weight:

- `score` criteria are the task: the reward is their weighted mean.
- `gate` criteria must pass (score >= `threshold`, default 1.0) or the reward is 0 whatever the rest
  say, like a format check that zeroes a response which did not put its answer where it was asked.
  Gates run first; when one fails the other criteria are not run at all (an LLM judge costs money) and
  report 0. A gate has no weight.
- `shaping` criteria are auxiliary rewards (brevity, a partial-progress bonus). They join the weighted
  mean, but are *declared*: their component is named `shaping/<name>`, `info["shaping"]` lists them,
  and `info["unshaped_reward"]` is the reward without them, so a trainer can drop them in one line.
  Their weights must add up to less than the score criteria's, so a response that fully solves the task
  always outscores one that solves none of it, however well shaped.

The reward, with `W` the sum of all score and shaping weights, is::

    reward = 0                                      if a gate failed
           = sum(w_i * s_i for score and shaping) / W   otherwise

and lies in [0, 1] (every `s_i` does). `unshaped_reward` is the same mean over the score criteria alone.
A criterion that cannot decide (its verifier timed out, crashed, or raised) makes the whole result a
failure (score 0, `failure` set, never to be trained on), except when a gate already failed cleanly: a
gated-out response is an honest 0 whatever the rest would have said.

Components: every criterion reports its score under its name (`shaping/<name>` for shaping), skipped
ones included (as 0.0), so component sets are identical across a batch. `info["criteria"]` holds each
criterion's own components and explanation.

```python
from functools import partial
from gym_verifiers import format, numeric
from gym_verifiers.rubric import Criterion, Rubric, brevity

rubric = Rubric([
    Criterion.gate("format", format.answer_tag_format),
    Criterion("correct", partial(numeric.numeric_match, reference="42")),
    Criterion.shaping("brevity", partial(brevity, target_chars=400, max_chars=4000), weight=0.1),
])
result = await rubric.score("<answer>42</answer>")  # result.score == 1.0
```

Rubrics can also be written as JSON (`Rubric.from_spec`), naming verifiers of this library as
`<module>.<function>` with their keyword arguments; `rubric_score(spec, response)` is that in one call,
and is what the golden fixtures in `fixtures/rubric.jsonl` exercise.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any, Protocol

from gym_server.sdk.environment import VerifyResult
from gym_verifiers.golden import resolve_verifier
from gym_verifiers.result import SCORE_MAX, SCORE_MIN, Failure, VerifierResult

__all__ = [
    "SHAPING_PREFIX",
    "Check",
    "Criterion",
    "CriterionKind",
    "CriterionOutcome",
    "Rubric",
    "RubricError",
    "RubricResult",
    "Scored",
    "brevity",
    "rubric_score",
]

SHAPING_PREFIX = "shaping/"


class Scored(Protocol):
    """Anything with a `score` (and optionally `components`, `explanation`, `failure`) a check may return."""

    @property
    def score(self) -> float: ...


CheckOutput = VerifierResult | Scored | float
Check = Callable[[str], CheckOutput | Awaitable[CheckOutput]]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")


class RubricError(ValueError):
    """A rubric or its JSON spec is malformed (raised when it is built, never while scoring)."""


class CriterionKind(StrEnum):
    """What a criterion does to the reward."""

    SCORE = "score"  # part of the task: weighted into the reward and the unshaped reward
    GATE = "gate"  # must reach its threshold or the reward is 0; carries no weight
    SHAPING = "shaping"  # an auxiliary reward: weighted into the reward, flagged, droppable


@dataclass(frozen=True, slots=True)
class Criterion:
    """One named check of a response.

    Args:
        name: component name (letters, digits, `_`, `.`, `-`; starts with a letter).
        check: called with the response; returns a `VerifierResult` (or any object with `score`,
            `components`, `explanation` and `failure`) or a float in [0, 1]; may be async.
        weight: share of the reward (score and shaping criteria); must be finite and >= 0.
        kind: `score`, `gate` or `shaping`.
        threshold: for gates, the score a response needs to pass, in (0, 1].
    """

    name: str
    check: Check
    weight: float = 1.0
    kind: CriterionKind = CriterionKind.SCORE
    threshold: float = 1.0

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise RubricError(f"criterion name {self.name!r} must match {_NAME.pattern}")
        if not callable(self.check):
            raise RubricError(f"criterion {self.name!r}: check {self.check!r} is not callable")
        if not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight) and self.weight >= 0):
            raise RubricError(f"criterion {self.name!r}: weight must be a finite number >= 0")
        if not 0.0 < self.threshold <= 1.0:
            raise RubricError(f"criterion {self.name!r}: threshold must be in (0, 1]")
        object.__setattr__(self, "kind", CriterionKind(self.kind))

    @classmethod
    def gate(cls, name: str, check: Check, *, threshold: float = 1.0) -> Criterion:
        """A gate: below `threshold` the whole reward is 0."""
        return cls(name, check, weight=0.0, kind=CriterionKind.GATE, threshold=threshold)

    @classmethod
    def shaping(cls, name: str, check: Check, *, weight: float) -> Criterion:
        """A declared shaping reward (see the module docstring for how it is flagged)."""
        return cls(name, check, weight=weight, kind=CriterionKind.SHAPING)

    @property
    def component(self) -> str:
        """The key this criterion's score is reported under."""
        return SHAPING_PREFIX + self.name if self.kind is CriterionKind.SHAPING else self.name


@dataclass(frozen=True, slots=True)
class CriterionOutcome:
    """What one criterion said (or that it was skipped because a gate failed)."""

    criterion: Criterion
    result: VerifierResult
    skipped: bool = False

    @property
    def passed_gate(self) -> bool:
        return self.result.failure is None and self.result.score >= self.criterion.threshold

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.criterion.kind.value,
            "weight": self.criterion.weight,
            "score": self.result.score,
            "components": dict(self.result.components),
            "explanation": self.result.explanation,
            "failure": self.result.failure,
            "skipped": self.skipped,
        }


@dataclass(frozen=True, slots=True)
class RubricResult:
    """A rubric's verdict: the verifier-result fields, the unshaped reward and every criterion's outcome."""

    score: float
    components: dict[str, float]
    explanation: str
    failure: str | None
    unshaped_score: float
    outcomes: tuple[CriterionOutcome, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.score >= SCORE_MAX

    def as_verifier_result(self) -> VerifierResult:
        return VerifierResult(self.score, self.components, self.explanation, self.failure)

    def to_verify_result(self, *, info: Mapping[str, Any] | None = None) -> VerifyResult:
        """The SDK's `VerifyResult`, with the rubric's info (shaping, unshaped reward, criteria) merged in."""
        return self.as_verifier_result().to_verify_result(info={**self.info, **(info or {})})

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "components": dict(self.components),
            "explanation": self.explanation,
            "failure": self.failure,
            "info": self.info,
        }


class Rubric:
    """Weighted criteria, gates and declared shaping terms combined into one bounded reward.

    Raises:
        RubricError: at construction, when names repeat, no score criterion carries weight, or the
            shaping weights are not below the score weights.
    """

    def __init__(self, criteria: Iterable[Criterion]) -> None:
        self.criteria: tuple[Criterion, ...] = tuple(criteria)
        names = [criterion.name for criterion in self.criteria]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise RubricError(f"criterion names repeat: {', '.join(duplicates)}")
        score_weight = self._weight(CriterionKind.SCORE)
        if score_weight <= 0:
            raise RubricError("a rubric needs at least one score criterion with a positive weight")
        shaping_weight = self._weight(CriterionKind.SHAPING)
        if shaping_weight >= score_weight:
            raise RubricError(
                f"shaping weights add up to {shaping_weight:g}, not below the score weights' "
                f"{score_weight:g}: shaping could outweigh solving the task"
            )

    def __repr__(self) -> str:
        parts = ", ".join(f"{c.component}:{c.kind.value}:{c.weight:g}" for c in self.criteria)
        return f"Rubric({parts})"

    def _weight(self, kind: CriterionKind) -> float:
        return sum(criterion.weight for criterion in self.criteria if criterion.kind is kind)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Rubric:
        """A rubric from its JSON form: `{"criteria": [{"name", "verifier", "args"?, "kind"?, "weight"?,
        "threshold"?}, ...]}`, each `verifier` a `<module>.<function>` of this library.

        Raises:
            RubricError: the spec is malformed or names an unknown verifier.
        """
        raw = spec.get("criteria") if isinstance(spec, Mapping) else None
        if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
            raise RubricError("a rubric spec needs a non-empty list 'criteria'")
        return cls(_criterion_from_spec(index, item) for index, item in enumerate(raw))

    async def score(self, response: str) -> RubricResult:
        """Run the gates, then (if they pass) the other criteria concurrently, and combine them."""
        gates = [c for c in self.criteria if c.kind is CriterionKind.GATE]
        others = [c for c in self.criteria if c.kind is not CriterionKind.GATE]
        outcomes = {o.criterion.name: o for o in await asyncio.gather(*(_run(c, response) for c in gates))}
        gated_out = [o for o in outcomes.values() if o.result.failure is None and not o.passed_gate]
        if gated_out:
            skipped = VerifierResult.zero("not run: a gate failed")
            outcomes.update({c.name: CriterionOutcome(c, skipped, skipped=True) for c in others})
        else:
            ran = await asyncio.gather(*(_run(c, response) for c in others))
            outcomes.update({o.criterion.name: o for o in ran})
        ordered = tuple(outcomes[c.name] for c in self.criteria)
        return self._combine(ordered, gated_out)

    def _combine(
        self, outcomes: tuple[CriterionOutcome, ...], gated_out: list[CriterionOutcome]
    ) -> RubricResult:
        components = {o.criterion.component: o.result.score for o in outcomes}
        info: dict[str, Any] = {
            "criteria": {o.criterion.name: o.to_dict() for o in outcomes},
            "shaping": [c.component for c in self.criteria if c.kind is CriterionKind.SHAPING],
            "gates": [c.name for c in self.criteria if c.kind is CriterionKind.GATE],
        }
        failed = [o for o in outcomes if o.result.failure is not None]
        if gated_out:
            names = ", ".join(o.criterion.name for o in gated_out)
            first = gated_out[0].result.explanation
            reason = f"gate {names} failed ({first}); reward 0"
            return self._result(0.0, 0.0, components, reason, None, outcomes, info)
        if failed:
            names = ", ".join(f"{o.criterion.name} ({o.result.failure})" for o in failed)
            reason = f"criterion {names} could not decide: {failed[0].result.explanation}"
            return self._result(0.0, 0.0, components, reason, failed[0].result.failure, outcomes, info)
        weighted = [o for o in outcomes if o.criterion.kind is not CriterionKind.GATE]
        total = _weighted_mean(weighted)
        unshaped = _weighted_mean([o for o in weighted if o.criterion.kind is CriterionKind.SCORE])
        reason = "; ".join(_describe(o) for o in outcomes)
        return self._result(total, unshaped, components, reason, None, outcomes, info)

    @staticmethod
    def _result(
        score: float,
        unshaped: float,
        components: dict[str, float],
        explanation: str,
        failure: str | None,
        outcomes: tuple[CriterionOutcome, ...],
        info: dict[str, Any],
    ) -> RubricResult:
        info["unshaped_reward"] = unshaped
        return RubricResult(score, components, explanation, failure, unshaped, outcomes, info)


def brevity(response: str, *, target_chars: int, max_chars: int) -> VerifierResult:
    """A shaping term for length: 1.0 up to `target_chars`, falling linearly to 0.0 at `max_chars`."""
    if not 0 < target_chars < max_chars:
        return VerifierResult.zero(
            "brevity needs 0 < target_chars < max_chars", failure=Failure.INVALID_REFERENCE
        )
    length = len(response)
    if length <= target_chars:
        return VerifierResult(1.0, {"brevity": 1.0}, f"{length} characters, within {target_chars}")
    value = max(0.0, (max_chars - length) / (max_chars - target_chars))
    return VerifierResult(value, {"brevity": value}, f"{length} characters; 1.0 up to {target_chars}")


async def rubric_score(spec: Mapping[str, Any], response: str) -> RubricResult:
    """Build the rubric `spec` describes and score `response` with it (for fixtures and JSON configs).

    A malformed spec is the task's fault: a zero with failure `invalid_reference`, never an exception.
    """
    try:
        rubric = Rubric.from_spec(spec)
    except RubricError as exc:
        zero = VerifierResult.zero(f"invalid rubric: {exc}", failure=Failure.INVALID_REFERENCE)
        return RubricResult(zero.score, {}, zero.explanation, zero.failure, 0.0)
    return await rubric.score(response)


# -- helpers ------------------------------------------------------------------------------------------


async def _run(criterion: Criterion, response: str) -> CriterionOutcome:
    """One criterion's verdict; a check that raises or returns nonsense is a failure, never an exception."""
    try:
        output = criterion.check(response)
        if inspect.isawaitable(output):
            output = await output
        result = _as_result(output)
    except Exception as exc:
        result = VerifierResult.zero(
            f"check raised {type(exc).__name__}: {str(exc)[:200]}", failure=Failure.VERIFY_CRASHED
        )
    return CriterionOutcome(criterion, result)


def _as_result(output: object) -> VerifierResult:
    if isinstance(output, VerifierResult):
        return output
    if isinstance(output, (int, float)) and not isinstance(output, bool):
        value = float(output)
        return VerifierResult(value, {}, f"scored {value:g}")  # raises ValueError when out of range
    score = getattr(output, "score", None)
    if score is None:
        raise TypeError(f"a check returned {type(output).__name__}, not a score")
    components = {str(k): float(v) for k, v in dict(getattr(output, "components", {}) or {}).items()}
    bounded = {k: v for k, v in components.items() if SCORE_MIN <= v <= SCORE_MAX}
    return VerifierResult(
        float(score),
        bounded,
        str(getattr(output, "explanation", "") or ""),
        getattr(output, "failure", None),
    )


def _weighted_mean(outcomes: list[CriterionOutcome]) -> float:
    weight = sum(o.criterion.weight for o in outcomes)
    if weight <= 0:
        return 0.0
    value = sum(o.criterion.weight * o.result.score for o in outcomes) / weight
    return min(SCORE_MAX, max(SCORE_MIN, value))  # guard float rounding, e.g. 1.0000000000000002


def _describe(outcome: CriterionOutcome) -> str:
    criterion = outcome.criterion
    if criterion.kind is CriterionKind.GATE:
        return f"{criterion.name} gate passed"
    tag = ", shaping" if criterion.kind is CriterionKind.SHAPING else ""
    return f"{criterion.name} {outcome.result.score:.3g} (w {criterion.weight:g}{tag})"


def _criterion_from_spec(index: int, item: object) -> Criterion:
    if not isinstance(item, Mapping):
        raise RubricError(f"criteria[{index}] must be an object")
    unknown = set(item) - {"name", "verifier", "args", "kind", "weight", "threshold"}
    if unknown:
        raise RubricError(f"criteria[{index}] has unknown keys: {', '.join(sorted(unknown))}")
    try:
        name, dotted = str(item["name"]), str(item["verifier"])
        args = dict(item.get("args") or {})
        kind = CriterionKind(item.get("kind", CriterionKind.SCORE))
        weight = float(item.get("weight", 0.0 if kind is CriterionKind.GATE else 1.0))
        threshold = float(item.get("threshold", 1.0))
        function = resolve_verifier(dotted)
    except (KeyError, TypeError, ValueError, ImportError) as exc:
        raise RubricError(f"criteria[{index}]: {type(exc).__name__}: {exc}") from exc
    if kind is CriterionKind.GATE and weight:
        raise RubricError(f"criteria[{index}]: a gate carries no weight")
    return Criterion(name, partial(function, **args), weight=weight, kind=kind, threshold=threshold)
