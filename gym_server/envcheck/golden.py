"""The golden-fixture engine: replay every golden fixture, of every verifier and every environment.

`gym-server verifiers check` (gym_server/cli/verifiers.py) prints what this finds, and `env check`
(`fixtures_check`) runs one environment's suite; the engine lives here, below both, so neither imports
the other.

Two kinds of fixture files are checked:

- **verifier fixtures**, `verifiers/gym_verifiers/fixtures/<module>.jsonl`: each case calls a verifier of
  the library with its arguments (`gym_verifiers.golden`); one suite per file.
- **environment fixtures**, `fixtures/golden.jsonl` beside each *registered* environment's module: the
  built-ins (`environments/<name>/`) and plugins installed from other distributions alike (a
  scaffolded `gym_env_<name>/fixtures/golden.jsonl`). Each case replays a transcript's assistant turns
  through a
  fresh environment (the engine `POST /v1/verify` uses, tool results recomputed) and compares the
  reward, and the components and failure when the case states them. One suite per file, named after its
  environment (or family). The row formats in use are all accepted: `messages` or `assistant` for the
  turns, `expected_reward` or `reward`, optional `expected_components` (a subset) and `expected_failure`;
  `env` names the environment when the file holds a family (`reasoning_gym/<task>`), else the file's
  environment is meant. `--environments DIR` checks `DIR/<name>/fixtures/golden.jsonl` instead, the
  folder's name standing for the environment.

Every case runs twice and must agree with itself (determinism). Every file must hold a `full`, a `zero`
and a `malformed` case (a case's kind is its `kind` field, else its name's first word). The table goes to
stdout; the exit status is 1 when any case failed **or was skipped** (its environment is not installed:
the line names it and the extra to install), so CI can run the command as is and a green run means every
case ran. Registered environments without a golden file are named on a line of their own.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gym_server.core.errors import GymError
from gym_server.core.settings import LimitSettings
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import Registry
from gym_server.sessions.replay import verify_transcript
from gym_verifiers.golden import (
    FIXTURES_DIR,
    REQUIRED_KINDS,
    GoldenFixtureError,
    check_golden,
    load_golden,
)

__all__ = [
    "EnvironmentFixtures",
    "SuiteResult",
    "check_environments",
    "check_verifiers",
    "environment_fixtures",
    "skip_lines",
]

TOLERANCE = 1e-6


@dataclass(slots=True)
class SuiteResult:
    """One fixture file's outcome."""

    name: str
    kind: str  # "verifier" or "environment"
    cases: int = 0
    passed: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)  # "<where> <case>: <what>", one per failed case
    skipped_envs: set[str] = field(default_factory=set)  # environments named by cases but not installed

    @property
    def failed(self) -> int:
        return self.cases - self.passed - self.skipped

    @property
    def ok(self) -> bool:
        return not self.problems


def check_verifiers(directory: Path = FIXTURES_DIR) -> list[SuiteResult]:
    """Run every verifier fixture under `directory`; a malformed file is a failed suite of its own."""
    try:
        cases = load_golden(directory)
    except GoldenFixtureError as exc:
        return [SuiteResult("verifiers/gym_verifiers/fixtures", "verifier", problems=[str(exc)])]
    suites: dict[str, SuiteResult] = {}
    for row in check_golden(cases):
        suite = suites.setdefault(row.case.file, SuiteResult(row.case.file, "verifier"))
        suite.cases += 1
        if row.passed:
            suite.passed += 1
        else:
            suite.problems.append(f"{row.case.where} {row.case.name}: {'; '.join(row.problems)}")
    return list(suites.values())


@dataclass(frozen=True, slots=True)
class EnvironmentFixtures:
    """One golden file and the environment its cases replay against when they name none."""

    suite: str
    path: Path
    default_env: str


def environment_fixtures(registry: Registry) -> tuple[list[EnvironmentFixtures], list[str]]:
    """The golden file beside each registered environment (plugins included), and the environments
    that have none. Environments of one family share a file and a suite named after the family."""
    by_path: dict[Path, list[str]] = {}
    for entry in registry:
        path = Path(inspect.getfile(entry.cls)).parent / "fixtures" / "golden.jsonl"
        by_path.setdefault(path, []).append(entry.name)
    files, uncovered = [], []
    for path, names in sorted(by_path.items(), key=lambda item: item[1][0]):
        if not path.is_file():
            uncovered.extend(names)
            continue
        families = {name.partition("/")[0] for name in names}
        suite = families.pop() if len(families) == 1 and "/" in names[0] else names[0]
        files.append(EnvironmentFixtures(suite, path, names[0] if len(names) == 1 else suite))
    return files, uncovered


def _folder_fixtures(directory: Path) -> list[EnvironmentFixtures]:
    paths = sorted(directory.glob("*/fixtures/golden.jsonl"))
    return [EnvironmentFixtures(p.parent.parent.name, p, p.parent.parent.name) for p in paths]


def check_environments(
    directory: Path | None = None,
    registry: Registry | None = None,
    limits: LimitSettings | None = None,
    only: str | None = None,
) -> list[SuiteResult]:
    """Replay the golden files of the registered environments (or those under `directory`)."""
    registry = registry if registry is not None else Registry.discover()
    files = _folder_fixtures(directory) if directory else environment_fixtures(registry)[0]
    return [
        asyncio.run(_check_environment_file(fixtures, registry, limits or LimitSettings()))
        for fixtures in files
        if not only or only in fixtures.suite
    ]


async def _check_environment_file(
    fixtures: EnvironmentFixtures, registry: Registry, limits: LimitSettings
) -> SuiteResult:
    suite = SuiteResult(fixtures.suite, "environment")
    kinds: set[str] = set()
    label = f"{fixtures.path.parent.parent.name}/fixtures/golden.jsonl"
    for number, line in enumerate(fixtures.path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        suite.cases += 1
        where = f"{label}:{number}"
        try:
            case = json.loads(line)
            name = str(case["name"])
        except (ValueError, KeyError, TypeError) as exc:
            suite.problems.append(f"{where}: not a golden case: {type(exc).__name__}: {exc}")
            continue
        kinds.add(str(case.get("kind") or name.split("_", 1)[0]))
        env = str(case.get("env") or fixtures.default_env)
        if env not in registry:
            suite.skipped += 1
            suite.skipped_envs.add(env)
            continue
        problems = await _check_environment_case(case, registry, env, limits)
        if problems:
            suite.problems.append(f"{where} {name}: {'; '.join(problems)}")
        else:
            suite.passed += 1
    missing = REQUIRED_KINDS - kinds
    if missing and suite.cases:
        suite.problems.append(f"{label}: no {', '.join(sorted(missing))} case")
    return suite


def skip_lines(suites: Iterable[SuiteResult], registry: Registry) -> list[str]:
    """One line per environment whose cases were skipped, with the extra to install where one is known."""
    envs = sorted({env for suite in suites for env in suite.skipped_envs})
    return [f"{env}: {registry.unavailable(env) or 'no such environment is installed'}" for env in envs]


async def _check_environment_case(
    case: dict[str, Any], registry: Registry, env: str, limits: LimitSettings
) -> list[str]:
    try:
        entry = registry.get(env)
        task = entry.task(str(case["task_id"]))
        raw = case.get("messages", case.get("assistant"))
        if not isinstance(raw, list):
            return ["no `messages` (or `assistant`) list"]
        turns = [Message.model_validate(m).to_dict() for m in raw if isinstance(m, dict)]
        turns = [turn for turn in turns if turn.get("role") == "assistant"]
        expected = float(case["expected_reward"] if "expected_reward" in case else case["reward"])
    except (GymError, ValidationError, KeyError, TypeError, ValueError) as exc:
        detail = exc.detail if isinstance(exc, GymError) else f"{type(exc).__name__}: {exc}"
        return [f"cannot replay: {detail}"[:300]]
    seed = case.get("seed")
    first, second = [
        await verify_transcript(entry, task, seed, copy.deepcopy(turns), limits) for _ in range(2)
    ]
    problems: list[str] = []
    if not math.isclose(first.reward, expected, abs_tol=TOLERANCE):
        problems.append(f"reward {first.reward:g} != expected {expected:g}")
    if "expected_failure" in case and first.failure != case["expected_failure"]:
        problems.append(f"failure {first.failure!r} != expected {case['expected_failure']!r}")
    for component, value in dict(case.get("expected_components") or {}).items():
        got = first.components.get(component)
        if got is None or not math.isclose(got, float(value), abs_tol=TOLERANCE):
            problems.append(f"component {component!r} = {got} != expected {value}")
    if first.model_dump(exclude={"info"}) != second.model_dump(exclude={"info"}):
        problems.append("two replays of the same transcript disagree")
    return problems
