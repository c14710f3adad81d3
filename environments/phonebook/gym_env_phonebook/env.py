"""Look a person's extension up with `lookup`, then `dial` it.

The easiest multi-turn tool task there is: the second call needs what the first one returned, and nothing
else. The extensions are drawn from the episode's seed, so they cannot be memorised from the task: a policy
must call `lookup` and copy its answer into `dial`. It exists so that a 135 M-parameter model can be shown to
learn a multi-turn tool environment through the gym (`gym-server demo --agent`, docs/agent-demo.md), where
`counter` needs arithmetic on a hidden value that such a model does not do reliably.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from gym_server import Environment, ForkMode, ToolError, VerifyResult, tool
from gym_server.sdk.tasks import Task, check_task_field

__all__ = ["PhonebookAnswer", "PhonebookEnv"]

# The other people in every episode's directory: a lookup of the wrong name answers with someone else's
# extension, so the name must be copied too.
COLLEAGUES = ("Ada Stone", "Ben Ortiz", "Cleo Park", "Dev Rao", "Eva Lind", "Finn Cole", "Gus Vale")


class PhonebookAnswer(BaseModel):
    """Whom to call, and how many digits the directory's extensions have (3 to 6: longer ones are harder
    to copy for a small model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(min_length=1, max_length=64)]
    digits: Annotated[int, Field(strict=True, ge=3, le=6)]


class PhonebookEnv(Environment):
    """A company directory with seeded extensions; the model must dial the one of the person named."""

    name = "phonebook"
    description = "Look up a person's extension with lookup(), then dial() it. The extension is hidden."
    multi_turn = True
    max_turns = 4
    reward_type = "binary: the dialled extension is the named person's"
    system_prompt = (
        "You are a phone operator. Call `lookup` with the person's full name to get their extension, "
        "then call `dial` with that extension."
    )
    # its state is a small dict and the dialled number: the default deep copy is exact
    fork_mode = ForkMode.COPY

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer names the person and the extension length."""
        check_task_field(PhonebookAnswer, task.answer, "answer")

    async def setup(self) -> None:
        answer = PhonebookAnswer.model_validate(self.task.answer)
        self.person = answer.name
        low, high = 10 ** (answer.digits - 1), 10**answer.digits - 1
        people = sorted({answer.name, *COLLEAGUES})
        self.directory = {person: self.rng.randint(low, high) for person in people}
        self.lookups: list[str] = []
        self.dialled: int | None = None

    @tool
    async def lookup(self, name: str) -> str:
        """Return a person's extension.

        Args:
            name: the person's full name, as written in the request
        """
        self.lookups.append(name)
        key = name.strip()
        if key not in self.directory:
            raise ToolError(f"no one named {key!r} in the directory")
        return str(self.directory[key])

    @tool
    async def dial(self, extension: int) -> str:
        """Dial an extension; this ends the call.

        Args:
            extension: the extension to dial
        """
        self.dialled = extension
        self.finish("dialled")
        return f"dialling {extension}"

    def reference_solution(self) -> list[dict[str, Any]]:
        """What a good operator does: look the person up, then dial what the lookup returned (the
        extension is known here, so the second turn does not depend on reading the first's reply)."""
        return [
            {"role": "assistant", "content": None, "tool_calls": [_call("lookup", {"name": self.person})]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call("dial", {"extension": self.directory[self.person]})],
            },
        ]

    async def verify(self) -> VerifyResult:
        correct = self.dialled is not None and self.dialled == self.directory[self.person]
        return VerifyResult(
            reward=float(correct),
            components={
                "correct": float(correct),
                "looked_up": float(self.person in (name.strip() for name in self.lookups)),
                "dialled": float(self.dialled is not None),
            },
            info={"extension": self.directory[self.person], "dialled": self.dialled, "lookups": self.lookups},
        )


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
