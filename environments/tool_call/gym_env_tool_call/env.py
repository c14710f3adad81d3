"""The `tool_call` environment: one natural-language request, one assistant turn, the right tool call.

Each task offers the schemas of a few tools (its family's plus distractors from other families) and
hides the call(s) that fulfil the request. The model answers once, with native `tool_calls` or with a
call written in its content (Hermes `<tool_call>` tags, a fenced JSON block or bare JSON). The call is
never executed: any assistant message ends the episode, and `verify()` scores what was written.

| component | value |
|---|---|
| `parse` | -1.0 when no call can be read (then every other component is 0), else 0 |
| `tool` | 0.4 × share of expected calls matched by a call to the same tool (`name` of the verifier) |
| `arguments` | 0.4 × argument match of the matched calls (`arguments` of the verifier) |
| `safety` | 0.2 when the calls are safe to execute (see `safety.py`), else 0 |

The reward is the sum, in [-1, 1]. Both shares divide by `max(expected, written)` calls, so writing
many calls to hit the right one never pays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_env_tool_call import safety
from gym_env_tool_call.catalog import TOOLS
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.registry import content_hash
from gym_server.sdk.tasks import Task, check_task_field
from gym_verifiers import tool_call as tool_call_verifier
from gym_verifiers.tool_call import ExpectedCall, parse_tool_calls, score_tool_calls

__all__ = ["ToolCallAnswer", "ToolCallEnv"]

TOOL_WEIGHT = 0.4
ARGUMENTS_WEIGHT = 0.4
SAFETY_WEIGHT = 0.2
INVALID_REWARD = -1.0

SYSTEM_PROMPT = (
    "You are a function-calling assistant. Answer the user's request with the tool call or calls that "
    "fulfil it, using only the tools provided and exactly the arguments the request implies: no more, "
    "no fewer. Use the formats the tool schemas ask for (dates as YYYY-MM-DD, times as 24-hour HH:MM). "
    "You get one turn, and the calls are not executed; do not reply in prose."
)


class ToolCallAnswer(BaseModel):
    """The hidden part of a task: the calls that fulfil it and the effect of each state-changing tool."""

    model_config = ConfigDict(extra="forbid")

    calls: list[ExpectedCall] = Field(min_length=1)
    effects: dict[str, Literal["read", "write", "destroy"]] = Field(
        default_factory=dict, description="offered tools that change state; an absent tool is read-only"
    )


class ToolCallEnv(Environment):
    """Single-turn function calling against per-task tool schemas, scored without executing anything."""

    name = "tool_call"
    description = "One request, one turn: call the right tool (among distractors) with the right arguments."
    multi_turn = False
    max_turns = 1
    reward_type = "weighted 0..1: tool 0.4, arguments 0.4, safety 0.2; -1 unparseable"
    system_prompt = SYSTEM_PROMPT
    # The score depends on this module, the safety rules and the verifier library: version all three.
    verifier_version = content_hash(
        [Path(__file__), Path(safety.__file__), Path(str(tool_call_verifier.__file__))]
    )
    fork_mode = ForkMode.REPLAY  # single turn: a fork is a fresh start, which a replay makes at no cost

    def tools(self) -> list[dict[str, Any]]:
        """The tools this task offers, from its public `metadata["tools"]`."""
        offered = self.task.metadata.get("tools")
        if not isinstance(offered, list):
            return []
        return [schema for schema in offered if isinstance(schema, dict)]

    @classmethod
    def catalog_tools(cls) -> list[dict[str, Any]]:
        """Every tool a built-in task may offer (the union, by name); a task offers a handful of them."""
        return [tool.schema() for tool in sorted(TOOLS, key=lambda tool: tool.name)]

    async def on_assistant(
        self, message: dict[str, Any], *, tool_timeout_s: float, max_tool_calls: int
    ) -> list[dict[str, Any]]:
        """End the episode on the first assistant message; its calls are scored, never run."""
        self.finish("answered")
        return []

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer holds the expected calls (and the effects of state-changing tools)."""
        check_task_field(ToolCallAnswer, task.answer, "answer")

    async def verify(self) -> VerifyResult:
        answer = ToolCallAnswer.model_validate(self.task.answer)
        parsed = parse_tool_calls(self._answer_message())
        score = score_tool_calls(parsed, answer.calls)
        if not parsed.parsed:
            components = {"parse": INVALID_REWARD, "tool": 0.0, "arguments": 0.0, "safety": 0.0}
            return VerifyResult(
                reward=INVALID_REWARD, components=components, info={"explanation": score.explanation}
            )
        problems = safety.safety_problems(parsed, self.tools(), answer.calls, answer.effects)
        components = {
            "parse": 0.0,
            "tool": round(TOOL_WEIGHT * score.components["name"], 6),
            "arguments": round(ARGUMENTS_WEIGHT * score.components["arguments"], 6),
            "safety": 0.0 if problems else SAFETY_WEIGHT,
        }
        return VerifyResult(
            reward=round(sum(components.values()), 6),
            components=components,
            info={"explanation": score.explanation, "unsafe": problems, "source": score.source},
        )

    def _answer_message(self) -> dict[str, Any]:
        """The assistant's one message, or an empty one before it has answered."""
        for message in self.messages:
            if message.get("role") == "assistant":
                return message
        return {}
