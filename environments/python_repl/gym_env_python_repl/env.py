"""The `python_repl` environment: answer a question by running Python in a persistent interpreter.

Multi-turn. The model calls `run_python(code)` as often as it likes; variables, imports and files
persist for the whole episode, in one interpreter that lives in the session's own sandbox (admitted
when the session starts, so a server with no sandbox free refuses the session with 429; started on the
first call, with the task's data files in its work dir; closed with the session). A cell that runs
past `cell_timeout_s` is stopped and the interpreter restarted (the tool message says so); so is one
that kills the interpreter. The episode ends with `submit_answer(answer)`, or with a plain assistant
message, which then counts as the answer.

Components: the reward is the verifier's score (1.0 when the answer matches: integers exactly, decimals
within the task's tolerance, names after text normalization); `submitted` is 1.0 when the answer came
through `submit_answer`; `tool_calls` is the share of the turn budget spent on `run_python` (0..1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_env_python_repl.repl import PythonSession
from gym_server.core.errors import SandboxUnavailable
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import content_hash
from gym_server.sdk.runtime import Limits, SessionSandbox, session_sandbox
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import ToolError, tool
from gym_verifiers.numeric import numeric_match
from gym_verifiers.result import VerifierResult
from gym_verifiers.text import normalized_match

__all__ = ["SYSTEM_PROMPT", "PythonReplEnv", "ReplAnswer", "score_answer"]

SYSTEM_PROMPT = (
    "You can run Python 3 code with the `run_python` tool. The interpreter keeps its state between calls, "
    "like a notebook, and its working directory holds the task's files; it has no network and no packages "
    "beyond the standard library. Work out the answer with code, then call `submit_answer` with the final "
    "answer only."
)


class ReplAnswer(BaseModel):
    """A task's hidden answer: the value, how to compare it, and the tolerance of a `float`."""

    model_config = ConfigDict(extra="forbid")

    value: Annotated[str, Field(min_length=1)] | int | float
    kind: Literal["int", "float", "text"] = "text"
    tolerance: float = Field(0.0, ge=0.0)


def score_answer(answer: Any, submitted: str) -> VerifierResult:
    """Compare a submitted answer with a task's `{"value", "kind", "tolerance"}` reference."""
    kind = answer.get("kind", "text")
    if kind in ("int", "float"):
        tolerance = float(answer.get("tolerance", 0.0))
        return numeric_match(submitted, str(answer["value"]), abs_tol=tolerance, rel_tol=0.0)
    return normalized_match(submitted, str(answer["value"]))


class PythonReplEnv(Environment):
    """Data analysis over small CSV files and numeric puzzles, solved in a sandboxed Python session."""

    name = "python_repl"
    description = "Answer questions by running Python in a persistent, sandboxed interpreter (run_python)."
    multi_turn = True
    max_turns = 16
    reward_type = "binary: the submitted answer matches (numeric tolerance)"
    system_prompt = SYSTEM_PROMPT
    verifier_version = content_hash([Path(__file__)])
    cell_timeout_s: ClassVar[float] = 10.0
    limits: ClassVar[Limits] = Limits(timeout_s=30, memory_mb=512, pids=64, disk_mb=64)
    # its state is an interpreter in its own sandbox: a fork replays in a fresh one
    fork_mode = ForkMode.REPLAY

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer is a `ReplAnswer`; `metadata.files` (optional) maps file names to their text."""
        check_task_field(ReplAnswer, task.answer, "answer")
        check_task_field(dict[str, str], task.metadata.get("files") or {}, "metadata.files")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sandbox: SessionSandbox | None = None
        self.session: PythonSession | None = None
        self.submitted: str | None = None
        self.cells = 0

    async def setup(self) -> None:
        self.sandbox = await session_sandbox(self.limits, session_id=self.task.id, egress=self.egress)

    async def _python(self) -> PythonSession:
        if self.session is None:
            if self.sandbox is None:
                raise SandboxUnavailable("the episode was not started (reset) or is closed")
            sandbox = await self.sandbox.get()
            for name, text in (self.task.metadata.get("files") or {}).items():
                await sandbox.put_file(name, text)
            self.session = PythonSession(sandbox)
        return self.session

    @tool
    async def run_python(self, code: str) -> str:
        """Run Python code in the persistent interpreter and return what it printed.

        Args:
            code: Python source; a final bare expression is echoed like in a notebook.
        """
        self.cells += 1
        try:
            session = await self._python()
            return await session.run(code, self.cell_timeout_s)
        except SandboxUnavailable as exc:
            raise ToolError(f"the Python sandbox is unavailable: {exc.detail}") from exc

    @tool
    async def submit_answer(self, answer: str) -> str:
        """Submit the final answer and end the episode.

        Args:
            answer: the answer alone, e.g. `42`, `3.14` or `north`.
        """
        self.submitted = answer
        self.finish("submitted")
        return "Answer recorded."

    def reference_solution(self) -> list[dict[str, Any]]:
        """The reference value through `submit_answer`."""
        return [_calls(("submit_answer", {"answer": str(self.task.answer["value"])}))]

    def hack_probes(self) -> list[HackProbe]:
        """The sandbox's limits: a fork bomb and a memory hog in a cell, then a cell that must still run."""
        after = ("run_python", {"code": "print(6 * 7)"})
        return [
            HackProbe(
                name="fork-bomb",
                kind="sandbox",
                messages=[
                    _calls(("run_python", {"code": "import os\nwhile True:\n    os.fork()"})),
                    _calls(after),
                ],
                expect="42",
                why="forks until the pid limit; the interpreter must come back",
            ),
            HackProbe(
                name="memory-hog",
                kind="sandbox",
                messages=[_calls(("run_python", {"code": "hog = bytearray(8 * 1024 ** 3)"})), _calls(after)],
                expect="42",
                why="8 GiB at once; the memory limit must stop it and the interpreter come back",
            ),
        ]

    async def verify(self) -> VerifyResult:
        through_tool = self.submitted is not None
        response = self.submitted if self.submitted is not None else self.final_answer()
        result = score_answer(self.task.answer, response)
        budget = self.max_turns or 16
        return result.to_verify_result(
            components={"submitted": float(through_tool), "tool_calls": min(1.0, self.cells / budget)},
            info={"answer": response[:200], "cells": self.cells},
        )

    async def close(self) -> None:
        try:
            if self.session is not None:
                await self.session.close()
        finally:
            if self.sandbox is not None:
                await self.sandbox.close()


def _calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """An assistant message making these tool calls."""
    made = [{"type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for n, a in calls]
    return {"role": "assistant", "content": None, "tool_calls": made}
