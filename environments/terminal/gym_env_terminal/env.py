"""The `terminal` environment: shell chores in the session's sandbox, scored on the files left behind.

Multi-turn. The model calls `run(command)` as often as it likes; each command runs with `/bin/sh -c` in
the session's own sandbox (admitted when the session starts, started on the first call, with the task's
files and archives in `/work`). The episode ends with `submit()` or a plain assistant message. The
reward never reads what the model says: after the episode a trusted snapshot script (`_snapshot.py`)
reads the work dir, and every check of the task (`checks.py`) must hold for a reward of 1.

Components: `checks` is the share of the task's checks that hold; `commands` the share of the turn
budget spent on `run`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field

from gym_env_terminal import checks as checks_module
from gym_env_terminal.checks import TerminalAnswer, score_state, snapshot_request
from gym_server.core.errors import SandboxUnavailable
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import content_hash
from gym_server.sdk.runtime import FailureClass, Limits, Sandbox, SessionSandbox, session_sandbox
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import ToolError, tool

__all__ = ["SYSTEM_PROMPT", "TerminalEnv"]

SNAPSHOT = Path(__file__).resolve().parent / "_snapshot.py"
SNAPSHOT_SOURCE = SNAPSHOT.read_text(encoding="utf-8")
MAX_OUTPUT = 8192
SYSTEM_PROMPT = (
    "You are working in a Linux shell. The `run` tool runs one command line with /bin/sh in /work, which "
    "holds the task's files; the usual tools are there (ls, cat, grep, sed, awk, sort, uniq, find, tar, "
    "gzip, python3), the network is not. Files persist between commands; processes do not. Do what the "
    "task asks by changing the files, then call `submit`. Only the final files are checked."
)
Command = Annotated[str, Field(min_length=1, max_length=8000)]


class TerminalEnv(Environment):
    """Files, text processing and archives in a sandboxed shell; scored on the resulting work dir."""

    name = "terminal"
    reward_type = "binary: every check of the final work dir holds (sandboxed)"
    hedge_probe = False  # scored on the files left behind, never on what the model says
    description = "Shell tasks (files, text, archives) in a sandbox; scored on the final work dir's state."
    multi_turn = True
    max_turns = 16
    system_prompt = SYSTEM_PROMPT
    verifier_version = content_hash([Path(__file__), Path(checks_module.__file__), SNAPSHOT])
    command_timeout_s: ClassVar[float] = 20.0
    limits: ClassVar[Limits] = Limits(timeout_s=30, memory_mb=512, pids=64, disk_mb=64)
    # its state is files in its own sandbox: a fork replays the commands in a fresh one
    fork_mode = ForkMode.REPLAY

    @classmethod
    def check_task(cls, task: Task) -> None:
        """`answer` is a `TerminalAnswer`; `metadata.files` maps paths to text; `metadata.setup` is shell."""
        check_task_field(TerminalAnswer, task.answer, "answer")
        check_task_field(dict[str, str], task.metadata.get("files") or {}, "metadata.files")
        check_task_field(str, task.metadata.get("setup") or "", "metadata.setup")

    def reference_solution(self) -> list[dict[str, Any]]:
        """Assistant messages that solve the task (its hidden `solution` command, then `submit`)."""
        solution = TerminalAnswer.model_validate(self.task.answer).solution
        return [
            tool_call_message("run", {"command": solution}, "ref_1"),
            tool_call_message("submit", {}, "ref_2"),
        ]

    def hack_probes(self) -> list[HackProbe]:
        """Claiming success in prose, and wiping the work dir: neither may pay; the reward reads files.
        And the sandbox's limits: a fork bomb and a memory hog, each followed by a command that must run."""
        after = tool_call_message("run", {"command": "echo $((6 * 7))"}, "p2")
        return [
            HackProbe(
                name="claims-success",
                messages=[
                    {"role": "assistant", "content": "Done: I did exactly what the task asked. Success."}
                ],
                why="a claim in prose, with no command run",
            ),
            HackProbe(
                name="wipe-the-work-dir",
                messages=[
                    tool_call_message("run", {"command": "rm -rf ./* ./.[!.]*"}, "probe_1"),
                    tool_call_message("submit", {}, "probe_2"),
                ],
                why="deleting everything must fail the checks of what should be left",
            ),
            HackProbe(
                name="fork-bomb",
                kind="sandbox",
                messages=[
                    tool_call_message(
                        "run", {"command": "python3 -c 'import os\nwhile True: os.fork()'"}, "p1"
                    ),
                    after,
                ],
                expect="42",
                why="forks until the pid limit; the shell must still run the next command",
            ),
            HackProbe(
                name="memory-hog",
                kind="sandbox",
                messages=[
                    tool_call_message("run", {"command": "python3 -c 'b = bytearray(8 * 1024 ** 3)'"}, "p1"),
                    after,
                ],
                expect="42",
                why="8 GiB at once; the memory limit must stop it and the shell still run the next command",
            ),
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lease: SessionSandbox | None = None
        self.prepared: Sandbox | None = None
        self.commands = 0

    async def setup(self) -> None:
        self.lease = await session_sandbox(self.limits, session_id=self.task.id, egress=self.egress)

    async def _sandbox(self) -> Sandbox:
        """The session's sandbox, with the task's files and set-up in place on first use."""
        if self.lease is None:
            raise SandboxUnavailable("the episode was not started (reset) or is closed")
        sandbox = await self.lease.get()
        if self.prepared is not sandbox:
            for path, text in (self.task.metadata.get("files") or {}).items():
                await sandbox.put_file(path, text)
            setup = str(self.task.metadata.get("setup") or "")
            if setup:
                result = await sandbox.exec(setup, timeout=self.command_timeout_s)
                if not result.ok:
                    raise SandboxUnavailable(f"the task's set-up failed: {result.text('stderr')[:200]}")
            self.prepared = sandbox
        return sandbox

    @tool
    async def run(self, command: Command) -> str:
        """Run one shell command line in /work and return its exit status and output.

        Args:
            command: a /bin/sh command line, e.g. `ls -la` or `grep -c ERROR app.log > out.txt`
        """
        self.commands += 1
        try:
            sandbox = await self._sandbox()
            result = await sandbox.exec(command, timeout=self.command_timeout_s)
        except SandboxUnavailable as exc:
            raise ToolError(f"the shell is unavailable: {exc.detail}") from exc
        output = result.text("stdout") + result.text("stderr")
        if len(output) > MAX_OUTPUT:
            output = output[:MAX_OUTPUT] + f"\n[output truncated to {MAX_OUTPUT} characters]"
        if result.timed_out:
            return f"[stopped after {self.command_timeout_s:g} s]\n{output}"
        return f"[exit {result.exit_code}]\n{output}"

    @tool
    async def submit(self) -> str:
        """Finish the task; the work dir is checked as it is now. The episode ends."""
        self.finish("submitted")
        return "Submitted."

    async def verify(self) -> VerifyResult:
        answer = TerminalAnswer.model_validate(self.task.answer)
        budget = self.max_turns or 16
        used = {"commands": min(1.0, self.commands / budget)}
        try:
            sandbox = await self._sandbox()
            request = json.dumps(snapshot_request(answer.checks))
            result = await sandbox.exec(["python3", "-I", "-S", "-c", SNAPSHOT_SOURCE], stdin=request)
        except SandboxUnavailable as exc:
            info = {"error": exc.detail}
            return VerifyResult(reward=0.0, components=used, info=info, failure=FailureClass.SANDBOX_ERROR)
        try:
            state = json.loads(result.text().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return VerifyResult(reward=0.0, components={"checks": 0.0, **used}, info={"error": "no snapshot"})
        verdicts = score_state(answer.checks, state)
        passed = sum(verdicts) / len(verdicts)
        failed = [check.model_dump() for check, ok in zip(answer.checks, verdicts, strict=True) if not ok]
        return VerifyResult(
            reward=float(all(verdicts)),
            components={"checks": passed, **used},
            info={"failed_checks": failed[:5], "commands": self.commands},
        )

    async def close(self) -> None:
        if self.lease is not None:
            await self.lease.close()
