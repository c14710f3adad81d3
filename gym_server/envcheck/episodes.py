"""Scripted episodes for `env check`: play fixed turns, a reference solution or a random policy through
the real turn engine (the deadlines `POST /v1/verify` uses), and report what came of them."""

from __future__ import annotations

import asyncio
import contextlib
import random
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from gym_server.core.settings import LimitSettings
from gym_server.sdk.environment import Environment, VerifyResult
from gym_server.sdk.registry import EnvironmentEntry
from gym_server.sdk.tasks import Task
from gym_server.sessions.deadlines import run_verifier, step_with_deadline

__all__ = ["Episode", "Policy", "play", "random_policy", "scripted", "with_env"]

T = TypeVar("T")
# The next assistant message given the episode so far; None ends the turns and the episode is verified.
Policy = Callable[[Environment], dict[str, Any] | None]


@dataclass(slots=True)
class Episode:
    """What one scripted episode produced."""

    result: VerifyResult | None = None
    error: str | None = None  # the environment raised (reset, a step or verify): not a score
    last_tool: str = ""  # the text of the last tool message
    turns: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reward(self) -> float:
        return self.result.reward if self.result is not None else 0.0


async def with_env(
    entry: EnvironmentEntry,
    task: Task,
    seed: int,
    limits: LimitSettings,
    use: Callable[[Environment], Awaitable[T]],
) -> T:
    """Run `use` on a freshly reset episode, closing it afterwards whatever happens."""
    env = entry.cls(task, seed)
    try:
        await asyncio.wait_for(env.reset(), limits.tool_timeout_s)
        return await use(env)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(env.close(), limits.tool_timeout_s)


async def play(
    entry: EnvironmentEntry, task: Task, seed: int, policy: Policy, limits: LimitSettings, max_turns: int = 8
) -> Episode:
    """One episode: reset, the policy's turns (at most `max_turns`, or the environment's own cap), verify."""
    episode = Episode()
    cap = min(max_turns, entry.cls.max_turns or max_turns, limits.max_turns)

    async def run(env: Environment) -> None:
        while not env.done and episode.turns < cap:
            message = policy(env)
            if message is None:
                break
            episode.turns += 1
            outcome = await step_with_deadline(env, message, limits)
            tools = [m for m in outcome.messages if m.get("role") == "tool"]
            if tools:
                episode.last_tool = str(tools[-1].get("content") or "")
        episode.result = await run_verifier(env, limits.verify_timeout_s)
        episode.messages = list(env.messages)

    try:
        await with_env(entry, task, seed, limits, run)
    except Exception as exc:  # the check reports it; one broken episode must not stop the others
        episode.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    return episode


def scripted(turns: list[dict[str, Any]]) -> Policy:
    """A policy that plays fixed assistant turns in order (each copied: the engine fills in ids)."""
    queue = [dict(turn, tool_calls=[dict(c) for c in turn.get("tool_calls") or []] or None) for turn in turns]
    for turn in queue:
        if turn["tool_calls"] is None:
            del turn["tool_calls"]

    def next_turn(env: Environment) -> dict[str, Any] | None:
        return queue.pop(0) if queue else None

    return next_turn


def random_policy(rng: random.Random) -> Policy:
    """The baseline: on each turn a tool call with random arguments (when there are tools) or a final
    answer drawn from numbers, words of the prompt and random text; it never reads the answer."""

    def next_turn(env: Environment) -> dict[str, Any] | None:
        tools = env.tools()
        if tools and rng.random() < 0.6:
            function = rng.choice(tools)["function"]
            arguments = orjson.dumps(
                _random_arguments(function.get("parameters") or {}, rng, _words(env))
            ).decode()
            call = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": _random_answer(env, rng)}

    return next_turn


def _words(env: Environment) -> list[str]:
    prompt = env.task.prompt if isinstance(env.task.prompt, str) else str(env.task.prompt[-1].get("content"))
    return [word.strip(".,;:?!()[]`'\"") for word in prompt.split() if word.strip(".,;:?!()[]`'\"")] or ["x"]


def _random_answer(env: Environment, rng: random.Random) -> str:
    choice = rng.randrange(3)
    if choice == 0:
        text = str(rng.randint(0, 20))
    elif choice == 1:
        text = " ".join(rng.choice(_words(env)) for _ in range(rng.randint(1, 4)))
    else:
        text = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 8)))
    return f"<answer>{text}</answer> \\boxed{{{text}}}" if rng.random() < 0.5 else text


def _random_arguments(schema: dict[str, Any], rng: random.Random, words: list[str]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    return {name: _random_value(spec, rng, words) for name, spec in properties.items() if rng.random() < 0.9}


def _random_value(spec: Any, rng: random.Random, words: list[str], depth: int = 0) -> Any:
    if not isinstance(spec, dict) or depth > 3:
        return rng.choice(words)
    if spec.get("enum"):
        return rng.choice(spec["enum"])
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = rng.choice([k for k in kind if k != "null"] or ["string"])
    if kind == "integer":
        return rng.randint(int(spec.get("minimum", -10)), int(spec.get("maximum", 10)))
    if kind == "number":
        return round(rng.uniform(float(spec.get("minimum", -10)), float(spec.get("maximum", 10))), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_random_value(spec.get("items"), rng, words, depth + 1) for _ in range(rng.randint(0, 2))]
    if kind == "object":
        return _random_arguments(spec, rng, words)
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
