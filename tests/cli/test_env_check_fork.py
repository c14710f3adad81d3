"""`env check`'s fork check (`envcheck.forking`): a deterministic environment's claim (replay), an exact
`copy_state` (copy) and `none` pass or skip; a copy that shares its original's state and a replay of an
environment that is not deterministic fail, naming where the fork and its original part."""

from __future__ import annotations

import json
import random
from typing import Any

from gym_env_counter.env import CounterEnv
from gym_server.envcheck import check_environment
from gym_server.sdk.environment import Environment, ForkMode
from gym_server.sdk.registry import Registry
from gym_server.sdk.tools import tool


def _call(name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments or {})}
    return {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": function}]}


class Stepwise(CounterEnv):
    """The counter, forked by replay, with a reference of one tool call a turn (several turns to fork at)."""

    name = "stepwise"
    dataset_name = "counter"
    fork_mode = ForkMode.REPLAY

    def reference_solution(self) -> list[dict[str, Any]]:
        turns, value = [_call("read")], self.value
        while value != self.target:
            amount = max(-10, min(10, self.target - value))
            turns.append(_call("add", {"amount": amount}))
            value += amount
        return [*turns, _call("read"), _call("submit")]


class CopyStepwise(Stepwise):
    name = "copy_stepwise"
    fork_mode = ForkMode.COPY


class SharedCopy(Stepwise):
    """Claims `copy`, but its copy is the original itself."""

    name = "shared_copy"
    fork_mode = ForkMode.COPY

    async def copy_state(self) -> SharedCopy:
        return self


class Frozen(Stepwise):
    name = "frozen"
    fork_mode = ForkMode.NONE


class Dice(Stepwise):
    """Rolls an unseeded die on its first turn: not deterministic."""

    name = "dice"

    @tool
    async def roll(self) -> int:
        """Roll a die nobody seeded."""
        return random.SystemRandom().randint(1, 1_000_000)

    def reference_solution(self) -> list[dict[str, Any]]:
        return [_call("roll"), *super().reference_solution()]


def fork_check(cls: type[CounterEnv]) -> Any:
    registry = Registry([cls])
    report = check_environment(registry.get(cls.name), registry, tasks=2)
    return report.get("fork")


def test_true_claims_pass_and_none_is_skipped() -> None:
    for cls in (Stepwise, CopyStepwise):
        check = fork_check(cls)
        assert check.status == "pass", check.detail
        assert check.data["fork_mode"] == cls.fork_mode.value and len(check.data["forked"]) == 2
    assert fork_check(Frozen).status == "skip"


def test_false_claims_fail_naming_where() -> None:
    shared = fork_check(SharedCopy)
    assert shared.status == "fail" and "differ at" in shared.detail, shared.detail
    dice = fork_check(Dice)
    forked_after_the_roll = [item for item in dice.data["forked"] if item["turn"] >= 1]
    assert forked_after_the_roll, dice.data  # the seeded choice of turn forks after the roll here
    assert dice.status == "fail" and "diverged at turn 1" in dice.detail, dice.detail


def test_every_built_in_declares_how_it_forks() -> None:
    """Each built-in says it in its own class (docs/fork.md's table), not by inheriting the default;
    `test_env_check.py` plays each one's fork check."""
    undeclared = [
        entry.name
        for entry in Registry.discover()
        if not any("fork_mode" in vars(klass) for klass in entry.cls.__mro__ if klass is not Environment)
    ]
    assert undeclared == []
