"""Code by unit tests: run a candidate program against trusted tests inside a sandbox, hacks closed.

The tests are Python snippets (`assert candidate(2) == 4`, or HumanEval's `check(candidate)`) plus
optional trusted set-up code (helpers the tests use) and optional stdin/stdout cases. They run in a
trusted harness process inside the sandbox (`_code_harness.py`); the candidate runs in a separate worker
process per test, so nothing it does can reach the tests, the comparisons or the verdict:

- *exit 0, `SystemExit` or `os._exit` before the tests*: the exit status is never read; loading or the
  call fails, so the test fails.
- *printing a fake "PASS" or a fake verdict*: the candidate's output goes nowhere, and the verdict line
  carries an HMAC under a random key the candidate never sees, so even a line injected into the
  harness's output pipe (reachable through /proc of a parent process) is ignored.
- *reading or editing the test file, reading the key*: there is no file; the tests and the key reach
  the harness's judge process on its stdin, read before any candidate code runs, in a non-dumpable
  process whose memory and descriptors are off limits. The candidate runs in workers forked from a
  factory process that the judge forked *before* reading the request, so no worker's memory ever
  held the key or the tests (see `_code_harness.py`).
- *objects whose `__eq__` is always true*: results cross as pickles of plain builtins (exact types),
  unpickled with no classes allowed, and are compared in the harness.
- *monkeypatching the checker, `builtins` or `sys.modules`*: the candidate's process is not the checker's.
- *syntax errors that skip collection*: the harness compiles first; every test then fails, none is skipped.
- *killing or stopping the harness, flooding its output*: no verdict, which scores 0, never a "sandbox
  failure" that a trainer would drop instead of learning from.

Reward: the fraction of tests passed (`mode="fraction"`) or 1.0 only when all pass (`mode="all"`). A
`failure` is set only when the verifier could not decide for reasons the candidate does not control: no
sandbox (`sandbox_error`) or broken trusted set-up code (`invalid_reference`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import marshal
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gym_server.core.errors import SandboxUnavailable
from gym_server.sdk.runtime import FailureClass, Limits, Sandbox, SandboxPool
from gym_verifiers.result import Failure, VerifierResult

__all__ = [
    "HARNESS_ARGV",
    "HARNESS_SOURCE",
    "CaseOutcome",
    "CodeReport",
    "encode_request",
    "extract_code",
    "run_code_tests",
    "verify_code",
]

HARNESS_SOURCE = (Path(__file__).resolve().parent / "_code_harness.py").read_text(encoding="utf-8")
# -I: no user site and no sandbox-writable folder on sys.path; -S: the site module's import is CPU we skip.
HARNESS_ARGV = ("python3", "-I", "-S", "-c", HARNESS_SOURCE)
_NOT_ISOLATED_EXIT = 3  # the harness could not make itself non-dumpable (`_code_harness.NOT_ISOLATED_EXIT`)
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    """One test: pass, fail (an assertion), error (the candidate or the program raised), timeout."""

    status: str
    detail: str = ""


@dataclass(slots=True)
class CodeReport:
    """Everything one verification learned; `result()` turns it into the library's score."""

    outcomes: list[CaseOutcome] = field(default_factory=list)
    compiled: bool = True
    error: str = ""
    failure: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return sum(outcome.status == "pass" for outcome in self.outcomes)

    @property
    def total(self) -> int:
        return len(self.outcomes)

    def result(self, mode: Literal["fraction", "all"] = "fraction") -> VerifierResult:
        rate = self.passed / self.total if self.total else 0.0
        components = {"pass_rate": rate, "compiled": float(self.compiled)}
        if self.failure is not None:
            return VerifierResult.zero(self.error, components, failure=self.failure)
        score = rate if mode == "fraction" else float(self.total > 0 and self.passed == self.total)
        explanation = f"{self.passed}/{self.total} tests passed"
        first = next((o for o in self.outcomes if o.status != "pass"), None)
        if self.error:
            explanation += f"; {self.error}"
        elif first is not None:
            explanation += f"; first problem: {first.status}: {first.detail}"
        return VerifierResult(score, components, explanation[:500])

    def to_info(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "total": self.total,
            "tests": [{"status": o.status, "detail": o.detail} for o in self.outcomes],
            "seconds": self.seconds,
        }


def extract_code(completion: str) -> str:
    """The program in a model's answer: the last fenced ```python block, else the whole text."""
    blocks = _FENCE.findall(completion)
    return str(blocks[-1]) if blocks else completion


async def run_code_tests(
    candidate: str,
    tests: Sequence[str] = (),
    *,
    runner: Sandbox | SandboxPool,
    entry_point: str | None = None,
    setup: str = "",
    io_cases: Sequence[Mapping[str, str]] = (),
    timeout_s: float = 20.0,
    call_timeout_s: float = 5.0,
) -> CodeReport:
    """Run the harness once in `runner` (a sandbox, or a pool to borrow one from) and read its verdict."""
    total = len(tests) + len(io_cases)
    key = secrets.token_hex(32)
    request = {
        "key": key,
        "candidate": candidate,
        "setup": setup,
        "tests": list(tests),
        "io_cases": [dict(case) for case in io_cases],
        "entry_point": entry_point,
        "timeout_s": timeout_s,
        "call_timeout_s": call_timeout_s,
    }
    argv = list(HARNESS_ARGV)
    payload = encode_request(request)
    try:
        if isinstance(runner, SandboxPool):
            result = await runner.run(argv, stdin=payload, timeout=timeout_s + 5)
        else:
            result = await runner.exec(argv, stdin=payload, timeout=timeout_s + 5)
    except SandboxUnavailable as exc:
        return CodeReport(
            error=f"sandbox unavailable: {exc.detail}", failure=FailureClass.SANDBOX_ERROR.value
        )
    verdict = _verdict(result.stdout, key)
    if verdict is None and result.exit_code == _NOT_ISOLATED_EXIT and not result.timed_out:
        detail = result.stderr.decode("utf-8", "replace").strip()[:300]
        return CodeReport(
            error=f"the sandbox cannot isolate the harness: {detail}",
            failure=FailureClass.SANDBOX_ERROR.value,
        )
    if verdict is None or len(verdict.get("results", [])) != total:
        why = "timed out" if result.timed_out else "was killed or interfered with"
        outcomes = [CaseOutcome("error", "no verdict")] * total
        return CodeReport(outcomes, error=f"the test harness {why} before reporting (no verdict)")
    report = CodeReport(
        [CaseOutcome(str(status), str(detail or "")) for status, detail in verdict["results"]],
        compiled=bool(verdict.get("compiled", True)),
        error=str(verdict.get("error", "")),
        seconds=float(verdict.get("seconds", 0.0)),
    )
    if "setup_error" in verdict:
        report.failure = Failure.INVALID_REFERENCE.value
        report.error = f"the task's own set-up code failed: {verdict['setup_error']}"
    return report


def encode_request(request: Mapping[str, Any]) -> bytes:
    """The harness's stdin: `marshal`, which the harness reads without importing anything (`json` costs
    it several ms of CPU per verification); the request holds only str, list, dict, float and None."""
    return marshal.dumps(dict(request))


def _verdict(stdout: bytes, key: str) -> dict[str, Any] | None:
    """The last verdict line whose HMAC verifies under `key`; lines anyone else wrote are ignored."""
    for line in reversed(stdout.splitlines()):
        tag, _, rest = line.partition(b" ")
        mac, _, body = rest.partition(b" ")
        if tag != b"GYM-VERDICT":
            continue
        expected = hmac.new(key.encode(), body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, expected):
            continue
        try:
            parsed = json.loads(body)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return None


async def verify_code(
    candidate: str,
    tests: Sequence[str] = (),
    *,
    entry_point: str | None = None,
    setup: str = "",
    io_cases: Sequence[Mapping[str, str]] = (),
    mode: Literal["fraction", "all"] = "fraction",
    timeout_s: float = 20.0,
    call_timeout_s: float = 5.0,
    runner: Sandbox | SandboxPool | None = None,
) -> VerifierResult:
    """Score `candidate` against `tests` (and `io_cases`) in a sandbox.

    Args:
        candidate: the program (extract it from a completion with `extract_code`).
        tests: trusted snippets; they see `candidate` (the entry point), the entry point's own name,
            `solution` (any top-level name of the program: `solution.helper(1)`) and the set-up names.
        entry_point: the function the tests call as `candidate`.
        setup: trusted code run before each test's namespace is built (helpers, HumanEval's `check`).
        io_cases: `{"stdin": ..., "stdout": ...}` pairs; the program's output must match line by line.
        mode: `fraction` of tests passed, or `all` (1.0 only when every test passes).
        runner: the sandbox or pool to use; by default a sandbox of the configured backend is started
            and closed for this call (slow: pass a pool in a server).

    Example:
        ```python
        result = await verify_code("def add(a, b):\\n    return a + b\\n", ["assert add(2, 3) == 5"],
                                   entry_point="add", runner=pool)
        assert result.score == 1.0
        ```
    """
    options: dict[str, Any] = {
        "entry_point": entry_point,
        "setup": setup,
        "io_cases": io_cases,
        "timeout_s": timeout_s,
        "call_timeout_s": call_timeout_s,
    }
    if runner is not None:
        report = await run_code_tests(candidate, tests, runner=runner, **options)
        return report.result(mode)
    from gym_server.core.settings import Settings
    from gym_server.sdk.runtime import select_backend

    try:
        backend = await select_backend(Settings())
    except SandboxUnavailable as exc:
        return CodeReport(error=exc.detail, failure=FailureClass.SANDBOX_ERROR.value).result(mode)
    try:
        sandbox = await backend.start(Limits(timeout_s=timeout_s + 5))
        try:
            report = await run_code_tests(candidate, tests, runner=sandbox, **options)
        finally:
            await sandbox.close()
    except SandboxUnavailable as exc:
        report = CodeReport(error=exc.detail, failure=FailureClass.SANDBOX_ERROR.value)
    finally:
        await backend.aclose()
    return report.result(mode)
