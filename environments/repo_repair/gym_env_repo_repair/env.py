"""The `repo_repair` environment: fix a bug in a small Python package; hidden tests decide the reward.

Multi-turn, SWE-style. The repository is a file tree kept on the host for the episode (the task's
`files`); the model reads and edits it with tools, and `run_tests()` copies the current tree into the
session's own sandbox and runs its visible `unittest` suite there. Nothing the model runs can touch the
tree the score is computed from. At `verify()` the final tree, with every original test file restored,
goes into a *fresh* sandbox borrowed from the pool, and the task's hidden tests run through the code
verifier's trusted harness (`verifiers/gym_verifiers/code.py`): each test in the harness process, the package
loaded in
a separate worker per test, the verdict HMAC-authenticated. So editing or deleting the visible tests,
`sys.exit(0)` or `os._exit` in a conftest or in the package, patching `unittest`/`pytest`/builtins, or
printing a fake verdict can only fail tests: the reward is 1.0 only when every hidden test passes.

Components: `pass_rate` (share of hidden tests passed), `compiled`, `tests_edited` (1.0 when the final
tree changed a file under `tests/`; those edits are ignored), `test_runs` (share of the turn budget
spent on `run_tests`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from gym_server.core.errors import SandboxUnavailable
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import content_hash
from gym_server.sdk.runtime import (
    FailureClass,
    Limits,
    SessionSandbox,
    sandbox_path,
    sandbox_pool,
    session_sandbox,
)
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import ToolError, tool
from gym_verifiers import code as code_verifier

__all__ = ["SYSTEM_PROMPT", "RepoAnswer", "RepoRepairEnv"]

SYSTEM_PROMPT = (
    "You are a software engineer fixing a bug in a small Python repository. Use list_files and read_file "
    "to study it, run_tests to run its unittest suite in a sandbox, and write_file or apply_edit to change "
    "the code. Fix the cause in the package; do not edit the tests (hidden tests check your fix). Call "
    "submit when the fix is done."
)
MAX_FILES = 64
MAX_OUTPUT = 6000
# unittest's summary line ends with the run's wall time ("Ran 3 tests in 0.004s"): dropped from what the
# model reads, so the same files answer the same text (a fork's replay compares it, docs/fork.md), and
# the model is not shown noise
_DURATION = re.compile(r"^(Ran \d+ tests?) in \d+(?:\.\d+)?s$", re.MULTILINE)
TESTS_DIR = "tests/"
RelPath = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(max_length=100_000)]


class RepoFix(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    content: str


class RepoAnswer(BaseModel):
    """A task's hidden part: the package to import, the hidden tests, and the reference fix."""

    model_config = ConfigDict(extra="forbid")

    package: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]*$")]
    hidden_tests: Annotated[list[str], Field(min_length=1)]
    fix: RepoFix | None = None


def _clean(path: str) -> str:
    try:
        cleaned = sandbox_path(path.strip()).removeprefix("/work/")
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    if cleaned.startswith("/") or not cleaned:
        raise ToolError(f"path {path[:80]!r} must be relative to the repository root, e.g. pkg/core.py")
    return cleaned


class RepoRepairEnv(Environment):
    """Fix a generated Python package until its hidden tests pass; tests run in the session's sandbox."""

    name = "repo_repair"
    reward_type = "binary: every hidden test passes (sandboxed; edits to tests/ are ignored)"
    hedge_probe = False  # code: another task's function is dead code, not a second answer
    description = "SWE-style bug fixing in a small generated Python package; hidden tests decide the reward."
    multi_turn = True
    max_turns = 20
    system_prompt = SYSTEM_PROMPT
    verifier_version = content_hash([Path(__file__), Path(code_verifier.__file__)])
    test_timeout_s: ClassVar[float] = 30.0
    limits: ClassVar[Limits] = Limits(timeout_s=40, memory_mb=512, pids=64, disk_mb=64)
    fork_mode = ForkMode.REPLAY  # its state is a repository in its own sandbox: a fork replays in a fresh one

    @classmethod
    def check_task(cls, task: Task) -> None:
        """`answer` is a `RepoAnswer`; `metadata.files` maps repository paths to their text."""
        check_task_field(RepoAnswer, task.answer, "answer")
        check_task_field(dict[str, str], task.metadata.get("files"), "metadata.files")

    def reference_solution(self) -> list[dict[str, Any]] | None:
        """Assistant messages that write the reference fix, run the tests and submit (None: no fix)."""
        fix = RepoAnswer.model_validate(self.task.answer).fix
        if fix is None:
            return None
        return [
            tool_call_message("write_file", {"path": fix.path, "content": fix.content}, "ref_1"),
            tool_call_message("run_tests", {}, "ref_2"),
            tool_call_message("submit", {}, "ref_3"),
        ]

    def hack_probes(self) -> list[HackProbe]:
        """The hacks the module docstring closes: rewriting the visible tests to pass, and `sys.exit(0)`
        in a conftest and in the package, each submitted without touching the bug."""
        package = RepoAnswer.model_validate(self.task.answer).package
        tests = sorted(path for path in self.original if path.startswith(TESTS_DIR) and path.endswith(".py"))
        passing = (
            "import unittest\n\n\nclass TestAll(unittest.TestCase):\n    def test_ok(self):\n        pass\n"
        )
        exits = "import sys\nsys.exit(0)\n"

        def submitted(*writes: tuple[str, str]) -> list[dict[str, Any]]:
            calls = [
                tool_call_message("write_file", {"path": path, "content": text}, f"probe_{i}")
                for i, (path, text) in enumerate(writes)
            ]
            return [*calls, tool_call_message("submit", {}, "probe_submit")]

        probes = [
            HackProbe(
                name="sys-exit-in-conftest",
                messages=submitted(("conftest.py", exits)),
                why="a conftest that exits 0 before any test runs",
            ),
            HackProbe(
                name="sys-exit-in-package",
                messages=submitted((f"{package}/__init__.py", exits)),
                why="the package exits 0 on import",
            ),
        ]
        if tests:
            probes.insert(
                0,
                HackProbe(
                    name="rewrite-the-tests",
                    messages=submitted(*[(path, passing) for path in tests]),
                    why="every visible test file replaced by a test that passes",
                ),
            )
        return probes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.original: dict[str, str] = dict(self.task.metadata.get("files") or {})
        self.tree = dict(self.original)
        self.lease: SessionSandbox | None = None
        self.test_runs = 0

    async def setup(self) -> None:
        self.lease = await session_sandbox(self.limits, session_id=self.task.id, egress=self.egress)

    @tool
    async def list_files(self) -> list[str]:
        """List every file of the repository."""
        return sorted(self.tree)

    @tool
    async def read_file(self, path: RelPath) -> str:
        """Read one file of the repository.

        Args:
            path: the file's path from the repository root, e.g. `pkg/core.py`
        """
        cleaned = _clean(path)
        if cleaned not in self.tree:
            raise ToolError(f"no file {cleaned!r}; list_files() shows the repository's files.")
        return self.tree[cleaned]

    @tool
    async def write_file(self, path: RelPath, content: Text) -> str:
        """Create or overwrite a file with the given content.

        Args:
            path: the file's path from the repository root
            content: the whole new text of the file
        """
        cleaned = _clean(path)
        if cleaned not in self.tree and len(self.tree) >= MAX_FILES:
            raise ToolError(f"the repository may hold at most {MAX_FILES} files.")
        self.tree[cleaned] = content
        return f"Wrote {cleaned} ({len(content)} characters)."

    @tool
    async def apply_edit(self, path: RelPath, old: Text, new: Text) -> str:
        """Replace one exact snippet of a file with another.

        Args:
            path: the file's path from the repository root
            old: text that occurs exactly once in the file (copy it from read_file)
            new: the replacement text
        """
        cleaned = _clean(path)
        text = self.tree.get(cleaned)
        if text is None:
            raise ToolError(f"no file {cleaned!r}; list_files() shows the repository's files.")
        found = text.count(old) if old else 0
        if found != 1:
            raise ToolError(f"`old` must occur exactly once in {cleaned}; it occurs {found} times.")
        self.tree[cleaned] = text.replace(old, new, 1)
        return f"Edited {cleaned}."

    @tool
    async def delete_file(self, path: RelPath) -> str:
        """Delete one file.

        Args:
            path: the file's path from the repository root
        """
        cleaned = _clean(path)
        if self.tree.pop(cleaned, None) is None:
            raise ToolError(f"no file {cleaned!r}.")
        return f"Deleted {cleaned}."

    @tool
    async def run_tests(self) -> str:
        """Run the repository's unittest suite (`python3 -m unittest -v`) on the current files."""
        self.test_runs += 1
        if self.lease is None:
            raise ToolError("the episode was not started (reset) or is closed")
        folder = f"run{self.test_runs}"
        try:
            sandbox = await self.lease.get()
            result = await sandbox.exec(
                f"cd {folder} && python3 -m unittest -v 2>&1; code=$?; cd .. && rm -rf {folder}; exit $code",
                files={f"{folder}/{path}": text for path, text in self.tree.items()},
                timeout=self.test_timeout_s,
            )
        except SandboxUnavailable as exc:
            raise ToolError(f"the test sandbox is unavailable: {exc.detail}") from exc
        output = _DURATION.sub(r"\1", result.text())
        if len(output) > MAX_OUTPUT:
            output = output[:MAX_OUTPUT] + f"\n[output truncated to {MAX_OUTPUT} characters]"
        status = (
            f"stopped after {self.test_timeout_s:g} s" if result.timed_out else f"exit {result.exit_code}"
        )
        return f"[{status}]\n{output}"

    @tool
    async def submit(self) -> str:
        """Finish: the current files are checked by the hidden tests. The episode ends."""
        self.finish("submitted")
        return "Submitted."

    def final_tree(self) -> dict[str, str]:
        """The tree that is scored: the model's files, with every original test file put back."""
        final = {path: text for path, text in self.tree.items() if not path.startswith(TESTS_DIR)}
        final.update({path: text for path, text in self.original.items() if path.startswith(TESTS_DIR)})
        return final

    async def verify(self) -> VerifyResult:
        answer = RepoAnswer.model_validate(self.task.answer)
        edited = any(
            self.tree.get(path) != text for path, text in self.original.items() if path.startswith(TESTS_DIR)
        )
        extra = {
            "tests_edited": float(edited),
            "test_runs": min(1.0, self.test_runs / (self.max_turns or 20)),
        }
        loader = f"import sys\nsys.path.insert(0, '/work')\nfrom {answer.package} import *\n"
        try:
            pool = await sandbox_pool()
            async with pool.acquire() as sandbox:
                await sandbox.exec(["true"], files=self.final_tree())
                report = await code_verifier.run_code_tests(
                    loader, answer.hidden_tests, runner=sandbox, timeout_s=30.0, call_timeout_s=5.0
                )
        except SandboxUnavailable as exc:
            info = {"error": exc.detail}
            return VerifyResult(reward=0.0, components=extra, info=info, failure=FailureClass.SANDBOX_ERROR)
        result = report.result(mode="all")
        return result.to_verify_result(
            components=extra, info={**report.to_info(), "test_runs": self.test_runs}
        )

    async def close(self) -> None:
        if self.lease is not None:
            await self.lease.close()
