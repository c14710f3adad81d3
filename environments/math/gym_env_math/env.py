"""The `math` environment: one procedurally generated problem, one assistant turn, a `\\boxed{}` answer.

The reward is the verdict of `gym_verifiers.math.math_match`: math-verify's equivalence of the
final answer and the task's LaTeX reference, for an answer written in the form the task asks for (the
task's `metadata.answer_form`, by default the reference's own shape: a literal number with fractions in
lowest terms, a simplified radical; an answer that restates the problem scores 0), computed in the
verifier library's shared, process-wide worker pool (created lazily on the first `verify()`, closed
at interpreter exit; see that module). The comparison runs in a child process that is killed past
`verify_timeout_s`, so `verify()` awaits it without blocking the event loop and never hangs on a
pathological answer: such a result carries failure `verify_timeout` and must not be trained on.

| component | value |
|---|---|
| `correct` | 1.0 when the final answer equals the reference, in the form asked, else 0.0; **the reward** |
| `format` | 1.0 when the response holds a `\\boxed{}` answer, as the system prompt asks (informational) |
| `extracted` | 1.0 when any final answer was found (`\\boxed{}`, `<answer>` or "the answer is") |
| `hedged` | 1.0 when the response offered several different answers; those score 0 |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.registry import content_hash
from gym_server.sdk.tasks import Task, TaskFieldError, check_task_field
from gym_verifiers import format as answer_format
from gym_verifiers import math as math_verifier
from gym_verifiers.format import extract_boxed, final_answer
from gym_verifiers.math import DEFAULT_TIMEOUT_S, AnswerForm, math_match

__all__ = ["SYSTEM_PROMPT", "MathEnv"]

SYSTEM_PROMPT = (
    "Solve the math problem. Reason step by step, then give the final answer exactly once, "
    "in simplest form, inside \\boxed{}, for example \\boxed{\\frac{3}{4}}."
)
SHOWN_ANSWER_CHARS = 200


class MathEnv(Environment):
    """Single-turn math problems whose `\\boxed{}` answer is checked for equivalence by math-verify."""

    name = "math"
    description = "Arithmetic, fractions, equations, percentages, algebra and counting; answer in \\boxed{}."
    multi_turn = False
    max_turns = 1
    reward_type = "binary: math-verify equivalence of the boxed answer"
    system_prompt = SYSTEM_PROMPT
    # The score depends on this module, the extraction rules and the math verifier: version all three.
    verifier_version = content_hash(
        [Path(__file__), Path(str(answer_format.__file__)), Path(str(math_verifier.__file__))]
    )
    verify_timeout_s: ClassVar[float] = DEFAULT_TIMEOUT_S
    fork_mode = ForkMode.REPLAY  # single turn: a fork is a fresh start, which a replay makes at no cost

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer is the reference (LaTeX or a number); `metadata.answer_form`, if given, a known form."""
        answer = task.answer
        # A bool is no number here, though Python says it is an int.
        if not ((isinstance(answer, str) and answer.strip()) or type(answer) in (int, float)):
            raise TaskFieldError([("answer", "must be the reference: a non-empty LaTeX string or a number")])
        if "answer_form" in task.metadata:
            check_task_field(AnswerForm, task.metadata["answer_form"], "metadata.answer_form")

    async def on_assistant(
        self, message: dict[str, Any], *, tool_timeout_s: float, max_tool_calls: int
    ) -> list[dict[str, Any]]:
        """End the episode on the first assistant message, whatever it holds: there are no tools to call."""
        self.finish("answered")
        return []

    def reference_solution(self) -> list[dict[str, Any]]:
        """The reference answer, boxed as the system prompt asks."""
        return [{"role": "assistant", "content": f"\\boxed{{{self.task.answer}}}"}]

    async def verify(self) -> VerifyResult:
        """Score the last assistant message against the task's reference answer."""
        completion = self.final_answer()
        result = await math_match(
            completion,
            str(self.task.answer),
            timeout_s=self.verify_timeout_s,
            form=self.task.metadata.get("answer_form", "auto"),
        )
        answer = final_answer(completion).text
        shown = (
            answer
            if answer is None or len(answer) <= SHOWN_ANSWER_CHARS
            else answer[:SHOWN_ANSWER_CHARS] + "..."
        )
        return result.to_verify_result(
            components={"format": float(bool(extract_boxed(completion)))}, info={"answer": shown}
        )
