"""`env check`'s fork check: does the environment fork the way its class says (`Environment.fork_mode`)?

On each sampled task it plays a reference episode (the environment's reference solution, else a random
policy's turns), forks it at a random turn k (seeded, so a report can be reproduced) the way the server
would (a `copy_state()` of the original after turn k, or a fresh instance replayed to turn k with every
observation compared), then finishes both with the same remaining turns and compares their transcripts
and scores. Any difference fails the check and names where: a `copy` whose copy shares state with its
original, or a `replay` environment that is not deterministic, shows up here before a trainer's tree
rollouts would silently use it. `none` is skipped.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from gym_server.envcheck.checks import CheckContext
from gym_server.envcheck.episodes import play, random_policy
from gym_server.envcheck.report import CheckResult
from gym_server.sdk.environment import Environment, ForkMode
from gym_server.sdk.tasks import Task
from gym_server.sessions.deadlines import run_verifier, step_with_deadline
from gym_server.sessions.fork import ForkDiverged, ForkSource, close_after, first_difference, replay_to_turn

__all__ = ["fork_claim"]

Turns = list[dict[str, Any]]


async def fork_claim(ctx: CheckContext, references: list[Turns]) -> CheckResult:
    """Fork a reference episode of each task at a random turn, finish both, and compare (module doc)."""
    mode = ctx.entry.cls.fork_mode
    if mode is ForkMode.NONE:
        return CheckResult(name="fork", status="skip", detail="fork_mode none: the environment does not fork")
    problems, forked = [], []
    for index, task in enumerate(ctx.tasks):
        turns = references[index] if index < len(references) else await _random_turns(ctx, task)
        if not turns:
            continue
        turn = random.Random(f"{ctx.seed}:{task.id}").randrange(len(turns))
        try:
            problem = await _compare_fork(ctx, task, turns, turn, mode)
        except ForkDiverged as exc:
            problem = exc.detail
        except Exception as exc:  # reported, like any other problem
            problem = f"raised {type(exc).__name__}: {str(exc)[:160]}"
        forked.append({"task": task.id, "turn": turn, "of": len(turns)})
        if problem is not None:
            problems.append(f"{task.id}, forked at turn {turn}: {problem}")
    data: dict[str, Any] = {"fork_mode": mode.value, "forked": forked}
    if problems:
        return CheckResult(name="fork", status="fail", detail="; ".join(problems[:3]), data=data)
    if not forked:
        return CheckResult(name="fork", status="skip", detail="no episode with a turn to fork at", data=data)
    detail = f"{mode.value}: {len(forked)} episodes forked at a random turn finish as their originals do"
    return CheckResult(name="fork", status="pass", detail=detail, data=data)


async def _random_turns(ctx: CheckContext, task: Task) -> Turns:
    episode = await play(ctx.entry, task, ctx.seed, random_policy(random.Random(11)), ctx.limits)
    return [message for message in episode.messages if message.get("role") == "assistant"]


async def _compare_fork(ctx: CheckContext, task: Task, turns: Turns, turn: int, mode: ForkMode) -> str | None:
    """None when the fork at `turn` finishes as the original does, else where it differs."""
    original = ctx.entry.cls(task, ctx.seed)
    async with close_after(original, ctx.limits):
        await original.reset()
        for message in turns[:turn]:
            await step_with_deadline(original, copy.deepcopy(message), ctx.limits)
        if mode is ForkMode.COPY:
            fork = await original.copy_state()
        else:
            fork = ctx.entry.cls(task, ctx.seed)
        async with close_after(fork, ctx.limits):
            if mode is ForkMode.REPLAY:
                await fork.reset()
                source = ForkSource(
                    id=f"{task.id} (seed {ctx.seed})",
                    entry=ctx.entry,
                    task=task,
                    seed=ctx.seed,
                    messages=list(original.messages),
                    turns=original.turns,
                    run=None,
                    policy=None,
                    metadata={},
                )
                await replay_to_turn(fork, source, turn, ctx.limits)
            return await _finish_in_step(original, fork, turns[turn:], turn, ctx)


async def _finish_in_step(
    original: Environment, fork: Environment, rest: Turns, turn: int, ctx: CheckContext
) -> str | None:
    """Play `rest` on both, a turn on each in turn (a copy sharing its original's state shows at the
    first turn), comparing each turn's answer, then their scores; None when all agree."""
    for number, message in enumerate(rest, start=turn + 1):
        if original.done or fork.done:
            outcomes: list[Any] = [original.done, fork.done]
            return _difference(f"turn {number}, whether the episode had ended", *outcomes)
        outcomes = []
        for env in (original, fork):
            outcome = await step_with_deadline(env, copy.deepcopy(message), ctx.limits)
            outcomes.append({"replies": outcome.messages, "done": outcome.done})
        if (problem := _difference(f"turn {number}", *outcomes)) is not None:
            return problem
    scores = []
    for env in (original, fork):
        result = await run_verifier(env, ctx.limits.verify_timeout_s)
        scores.append({"reward": result.reward, "components": result.components})
    return _difference("the score", *scores)


def _difference(what: str, original: Any, fork: Any) -> str | None:
    found = first_difference(original, fork)
    if found is None:
        return None
    path, left, right = found
    return f"the original and the fork differ at {what}{path}: {str(left)[:80]} against {str(right)[:80]}"
