"""Golden fixtures: every verifier's known answers, replayable by tests and by `gym-server verifiers check`.

Fixtures live in `gym_verifiers/fixtures/<module>.jsonl`, one case a line, and need no Python package
of
their own. A row names the verifier it exercises, its keyword arguments and what it must return:

```json
{"name": "boxed_fraction", "kind": "full", "verifier": "math.math_match",
 "args": {"completion": "so \\\\boxed{0.75}", "reference": "\\\\frac{3}{4}"},
 "expect": {"score": 1.0, "failure": null, "components": {"correct": 1.0}}}
```

- `verifier` is `<module>.<function>` inside `gym_verifiers`; async functions are run to completion.
- `kind` is one of `KINDS`; every fixture file must hold at least a `full`, a `zero` and a `malformed` case.
- `expect.score` is required; `expect.failure` defaults to null; `expect.components` is a subset to check.

A *flat* row (no `args`) is accepted too, for fixture files written before this format: the verifier
is the one public `verify*` function its module defines, the arguments are the row's keys that the
function's signature names, the expectation is the row's own `score` / `components` / `failure`, and a
missing `kind` is read from the name's first word or else from the score.

A verifier may return a `VerifierResult` or any object with `score`, `components` and `explanation`
attributes. `check_golden()` runs each case twice and reports, per case, whether the result matched and
whether the two runs agreed (determinism). Call it from synchronous code: it runs async verifiers with
`asyncio.run`.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FIXTURES_DIR",
    "KINDS",
    "GoldenCase",
    "GoldenFixtureError",
    "GoldenRow",
    "check_golden",
    "load_golden",
    "resolve_verifier",
]

FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"
KINDS = frozenset({"full", "partial", "zero", "malformed", "hedged", "failure"})
REQUIRED_KINDS = frozenset({"full", "zero", "malformed"})
SCORE_TOLERANCE = 1e-6

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


class GoldenFixtureError(ValueError):
    """A fixture file or row is malformed; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class GoldenCase:
    """One fixture row, resolved: which verifier to call with what, and what it must return."""

    file: str
    line: int
    name: str
    kind: str
    verifier: str
    args: dict[str, Any]
    score: float
    failure: str | None = None
    components: dict[str, float] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class GoldenRow:
    """The outcome of one case: passed means matched and deterministic; `problems` says what failed."""

    case: GoldenCase
    passed: bool
    deterministic: bool
    result: dict[str, Any] | None
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.case.file,
            "line": self.case.line,
            "name": self.case.name,
            "kind": self.case.kind,
            "verifier": self.case.verifier,
            "passed": self.passed,
            "deterministic": self.deterministic,
            "result": self.result,
            "problems": list(self.problems),
        }


def load_golden(directory: Path = FIXTURES_DIR) -> list[GoldenCase]:
    """Every case of every `*.jsonl` file in `directory`, in file and line order.

    Raises:
        GoldenFixtureError: a row is not valid JSON or lacks what it needs, or a file misses a required kind.
    """
    cases: list[GoldenCase] = []
    for path in sorted(directory.glob("*.jsonl")):
        file_cases = [
            _case(path, number, line)
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            if line.strip()
        ]
        missing = REQUIRED_KINDS - {case.kind for case in file_cases}
        if missing:
            raise GoldenFixtureError(f"{path.name}: no {', '.join(sorted(missing))} case")
        cases.extend(file_cases)
    return cases


def check_golden(cases: Iterable[GoldenCase] | None = None) -> list[GoldenRow]:
    """Run every case twice; a row per case with pass/fail, determinism and the problems found."""
    return [_check(case) for case in (load_golden() if cases is None else cases)]


def resolve_verifier(dotted: str) -> Callable[..., Any]:
    """The public function `gym_verifiers.<module>.<function>` named by `dotted`."""
    module_name, _, function_name = dotted.partition(".")
    if not (_NAME.match(module_name) and _NAME.match(function_name)) or function_name.startswith("_"):
        raise GoldenFixtureError(f"verifier {dotted!r} must be '<module>.<public function>'")
    module = importlib.import_module(f"gym_verifiers.{module_name}")
    function = getattr(module, function_name, None)
    if not callable(function):
        raise GoldenFixtureError(f"gym_verifiers.{module_name} has no function {function_name!r}")
    return function  # type: ignore[no-any-return]


def _case(path: Path, number: int, line: str) -> GoldenCase:
    where = f"{path.name}:{number}"
    try:
        row = json.loads(line)
        name = str(row["name"])
        if "args" in row:
            verifier, args, expect = str(row["verifier"]), dict(row["args"]), dict(row["expect"])
        else:
            verifier = str(row.get("verifier") or _default_verifier(path.stem))
            wanted = inspect.signature(resolve_verifier(verifier)).parameters
            args = {key: value for key, value in row.items() if key in wanted}
            expect = row
        score = float(expect["score"])
        kind = str(row.get("kind") or _infer_kind(name, score))
        components = {str(k): float(v) for k, v in dict(expect.get("components") or {}).items()}
        failure = expect.get("failure")
    except (ValueError, KeyError, TypeError, ImportError) as exc:
        raise GoldenFixtureError(f"{where}: not a golden case: {type(exc).__name__}: {exc}") from exc
    if kind not in KINDS:
        raise GoldenFixtureError(f"{where}: kind {kind!r} is not one of {sorted(KINDS)}")
    return GoldenCase(path.name, number, name, kind, verifier, args, score, failure, components)


def _default_verifier(module_name: str) -> str:
    """The one public function named `verify*` that the module itself defines, for flat rows."""
    module = importlib.import_module(f"gym_verifiers.{module_name}")
    names = [
        name
        for name, value in vars(module).items()
        if name.startswith("verify") and inspect.isfunction(value) and value.__module__ == module.__name__
    ]
    if len(names) != 1:
        raise GoldenFixtureError(f"flat rows need one verify* function in {module_name}, found {names}")
    return f"{module_name}.{names[0]}"


def _infer_kind(name: str, score: float) -> str:
    first = name.split("_", 1)[0]
    if first in KINDS:
        return first
    return "full" if score >= 1.0 else "zero" if score <= 0.0 else "partial"


def _run(case: GoldenCase) -> dict[str, Any]:
    function = resolve_verifier(case.verifier)
    outcome = function(**case.args)
    if inspect.isawaitable(outcome):
        outcome = asyncio.run(_awaited(outcome))
    try:
        return {
            "score": float(outcome.score),
            "components": {str(k): float(v) for k, v in dict(outcome.components).items()},
            "explanation": str(outcome.explanation),
            "failure": getattr(outcome, "failure", None),
        }
    except (AttributeError, TypeError, ValueError) as exc:
        raise TypeError(f"{case.verifier} returned {type(outcome).__name__}, not a verifier result") from exc


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _check(case: GoldenCase) -> GoldenRow:
    try:
        first, second = _run(case), _run(case)
    except Exception as exc:  # a verifier that raises on its own fixture is a failed case, not a crash
        return GoldenRow(case, False, False, None, (f"raised {type(exc).__name__}: {exc}",))
    problems: list[str] = []
    if not math.isclose(first["score"], case.score, abs_tol=SCORE_TOLERANCE):
        problems.append(f"score {first['score']} != expected {case.score}")
    if first["failure"] != case.failure:
        problems.append(f"failure {first['failure']!r} != expected {case.failure!r}")
    for name, expected in case.components.items():
        got = first["components"].get(name)
        if got is None or not math.isclose(got, expected, abs_tol=SCORE_TOLERANCE):
            problems.append(f"component {name!r} = {got} != expected {expected}")
    if not 0.0 <= first["score"] <= 1.0:
        problems.append(f"score {first['score']} outside [0, 1]")
    deterministic = first == second
    if not deterministic:
        problems.append("two runs on the same input disagree")
    return GoldenRow(case, not problems, deterministic, first, tuple(problems))
