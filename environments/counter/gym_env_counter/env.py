"""Reach a target number with `add` calls, then `submit`.

The smallest environment with state, tools, several turns and a verifier that checks state rather than
wording. It is the one the README's curl walk-through plays and the session benchmark drives, because
its steps cost almost nothing and so measure the server, not the environment.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field

from gym_server import Environment, ForkMode, ToolError, VerifyResult, tool
from gym_server.sdk.tasks import Task, check_task_field

__all__ = ["CounterEnv"]

MAX_STEP = 10
Target = Annotated[int, Field(strict=True, ge=-(10**9), le=10**9)]


class CounterEnv(Environment):
    """A counter starts at a seeded value; the model must bring it to the target and submit."""

    name = "counter"
    description = "Bring a counter to a target value with add() calls, then submit(). State is checked."
    multi_turn = True
    max_turns = 32
    reward_type = "binary: the counter equals the target"
    system_prompt = (
        "You control a counter. Call `read` to see its value, `add` to change it by -10..10, "
        "and `submit` when it equals the target."
    )
    fork_mode = ForkMode.COPY  # its state is a few integers: the default deep copy is exact

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer is the target: an integer."""
        check_task_field(Target, task.answer, "answer")

    async def setup(self) -> None:
        self.value = self.rng.randint(0, 20)
        self.target = int(self.task.answer)
        self.calls = 0

    @tool
    async def read(self) -> int:
        """Return the counter's current value."""
        self.calls += 1
        return self.value

    @tool
    async def add(self, amount: int) -> int:
        """Add an amount to the counter and return the new value.

        Args:
            amount: between -10 and 10
        """
        if not -MAX_STEP <= amount <= MAX_STEP:
            raise ToolError(f"amount must be between {-MAX_STEP} and {MAX_STEP}, got {amount}")
        self.calls += 1
        self.value += amount
        return self.value

    @tool
    async def submit(self) -> str:
        """Finish the episode with the counter as it is."""
        self.finish("submitted")
        return f"submitted {self.value}"

    def reference_solution(self) -> list[dict[str, Any]]:
        """`add` calls of at most 10 from the start value to the target, then `submit`."""
        calls, value = [], self.value
        while value != self.target:
            amount = max(-MAX_STEP, min(MAX_STEP, self.target - value))
            calls.append(_call("add", {"amount": amount}))
            value += amount
        calls.append(_call("submit", {}))
        return [
            {"role": "assistant", "content": None, "tool_calls": calls[i : i + 16]}
            for i in range(0, len(calls), 16)
        ]

    async def verify(self) -> VerifyResult:
        reached = self.value == self.target
        distance = abs(self.value - self.target)
        return VerifyResult(
            reward=1.0 if reached else 0.0,
            components={"reached": float(reached), "submitted": float(self.done_reason == "submitted")},
            info={"value": self.value, "target": self.target, "distance": distance, "tool_calls": self.calls},
        )


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
