"""`gym-server verifiers check`: replay every golden fixture, of every verifier and every environment.

Two kinds of fixture files are checked:

- **verifier fixtures**, `verifiers/fixtures/<module>.jsonl`: each case calls a verifier of the library
  with its arguments (`gym_server.verifiers.golden`); one suite per file.
- **environment fixtures**, `environments/<name>/fixtures/golden.jsonl`: each case replays a transcript's
  assistant turns through a fresh environment (the engine `POST /v1/verify` uses, tool results
  recomputed) and compares the reward, and the components and failure when the case states them. One
  suite per file. The row formats in use are all accepted: `messages` or `assistant` for the turns,
  `expected_reward` or `reward`, optional `expected_components` (a subset) and `expected_failure`; `env`
  names the environment when the folder holds a family (`reasoning_gym/<task>`), else the folder's name is
  the environment's. An environment that is not installed is reported as skipped, not failed.

Every case runs twice and must agree with itself (determinism). Every file must hold a `full`, a `zero`
and a `malformed` case (a case's kind is its `kind` field, else its name's first word). The table goes to
stdout; the exit status is 1 when any case failed, so CI can run the command as is.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gym_server.errors import GymError
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import Registry
from gym_server.sessions.replay import verify_transcript
from gym_server.settings import LimitSettings
from gym_server.verifiers.golden import (
    FIXTURES_DIR,
    REQUIRED_KINDS,
    GoldenFixtureError,
    check_golden,
    load_golden,
)

__all__ = [
    "ENVIRONMENTS_DIR",
    "SuiteResult",
    "app",
    "check",
    "check_environments",
    "check_verifiers",
    "load_registry",
]

ENVIRONMENTS_DIR = Path(__file__).resolve().parent.parent / "environments"
TOLERANCE = 1e-6

app = typer.Typer(help="Prove the verifiers: replay their golden fixtures.", no_args_is_help=True)
console = Console()


@dataclass(slots=True)
class SuiteResult:
    """One fixture file's outcome."""

    name: str
    kind: str  # "verifier" or "environment"
    cases: int = 0
    passed: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)  # "<where> <case>: <what>", one per failed case

    @property
    def failed(self) -> int:
        return self.cases - self.passed - self.skipped

    @property
    def ok(self) -> bool:
        return not self.problems


def load_registry() -> Registry:
    """The installed environments (a seam: tests substitute their own)."""
    return Registry.discover()


def check_verifiers(directory: Path = FIXTURES_DIR) -> list[SuiteResult]:
    """Run every verifier fixture under `directory`; a malformed file is a failed suite of its own."""
    try:
        cases = load_golden(directory)
    except GoldenFixtureError as exc:
        return [SuiteResult("verifiers/fixtures", "verifier", problems=[str(exc)])]
    suites: dict[str, SuiteResult] = {}
    for row in check_golden(cases):
        suite = suites.setdefault(row.case.file, SuiteResult(row.case.file, "verifier"))
        suite.cases += 1
        if row.passed:
            suite.passed += 1
        else:
            suite.problems.append(f"{row.case.where} {row.case.name}: {'; '.join(row.problems)}")
    return list(suites.values())


def check_environments(
    directory: Path = ENVIRONMENTS_DIR, registry: Registry | None = None, limits: LimitSettings | None = None
) -> list[SuiteResult]:
    """Replay every `<env>/fixtures/golden.jsonl` under `directory` against the installed environments."""
    registry = registry if registry is not None else load_registry()
    limits = limits or LimitSettings()
    files = sorted(directory.glob("*/fixtures/golden.jsonl"))
    texts = [(path.parent.parent.name, path.read_text(encoding="utf-8")) for path in files]
    return [asyncio.run(_check_environment_file(name, text, registry, limits)) for name, text in texts]


async def _check_environment_file(
    folder: str, text: str, registry: Registry, limits: LimitSettings
) -> SuiteResult:
    suite = SuiteResult(folder, "environment")
    kinds: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        suite.cases += 1
        where = f"{folder}/fixtures/golden.jsonl:{number}"
        try:
            case = json.loads(line)
            name = str(case["name"])
        except (ValueError, KeyError, TypeError) as exc:
            suite.problems.append(f"{where}: not a golden case: {type(exc).__name__}: {exc}")
            continue
        kinds.add(str(case.get("kind") or name.split("_", 1)[0]))
        env = str(case.get("env") or folder)
        if env not in registry:
            suite.skipped += 1
            continue
        problems = await _check_environment_case(case, registry, env, limits)
        if problems:
            suite.problems.append(f"{where} {name}: {'; '.join(problems)}")
        else:
            suite.passed += 1
    missing = REQUIRED_KINDS - kinds
    if missing and suite.cases:
        suite.problems.append(f"{folder}/fixtures/golden.jsonl: no {', '.join(sorted(missing))} case")
    return suite


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


@app.command()
def check(
    fixtures: Annotated[
        Path, typer.Option(help="Verifier fixture folder.", file_okay=False, exists=True)
    ] = FIXTURES_DIR,
    environments: Annotated[
        Path, typer.Option(help="Folder of environment folders.", file_okay=False, exists=True)
    ] = ENVIRONMENTS_DIR,
    only: Annotated[str | None, typer.Option(help="Only suites whose name contains this.")] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Only the table, not each failed case.")
    ] = False,
) -> None:
    """Replay every golden fixture of every verifier and environment; exit 1 when any case fails."""
    from gym_server.verifiers.math import close_shared_pool

    try:
        suites = [*check_verifiers(fixtures), *check_environments(environments)]
    finally:
        close_shared_pool()
    if only:
        suites = [suite for suite in suites if only in suite.name]
    table = Table("suite", "kind", "cases", "passed", "failed", "skipped", title="golden fixtures")
    for suite in suites:
        style = "green" if suite.ok else "red"
        table.add_row(
            escape(suite.name),
            suite.kind,
            str(suite.cases),
            f"[{style}]{suite.passed}[/{style}]",
            f"[{style}]{suite.failed}[/{style}]" if suite.failed else "0",
            str(suite.skipped),
        )
    console.print(table)
    problems = [problem for suite in suites for problem in suite.problems]
    if not quiet:
        for problem in problems:
            console.print(f"[red]FAIL[/red] {escape(problem)}")
    passed, failed = sum(s.passed for s in suites), sum(s.failed for s in suites)
    skipped = sum(s.skipped for s in suites)
    console.print(f"golden cases: {passed} passed, {failed} failed, {skipped} skipped")
    if problems:
        raise typer.Exit(1)
