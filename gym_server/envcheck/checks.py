"""The checks of `gym-server env check`, each over a handful of tasks of one environment.

Generic probes need nothing from the environment beyond its contract (tasks, tools, the turn engine,
`verify`); the hedging probe needs a reference solution, and the environment-specific probes and the
sandbox check come from the optional hooks `Environment.reference_solution()` and `hack_probes()`.

A generic probe (empty answer, prompt echo, hedging, tool spam) **fails** when it earns a mean reward of
0.5 or more over the tasks, or when the environment raises on it, and **warns** when it earns anything
at all: a probe that sometimes lands on the answer by chance (a counter that starts at its target) is
worth a look but is not a hack.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from gym_server.core.settings import LimitSettings
from gym_server.envcheck.episodes import Episode, Policy, play, random_policy, scripted, with_env
from gym_server.envcheck.report import CheckResult, Status
from gym_server.sdk.environment import Environment
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import EnvironmentEntry
from gym_server.sdk.tasks import Task

__all__ = [
    "CheckContext",
    "determinism",
    "generic_probes",
    "own_probes",
    "reference",
    "spread_and_throughput",
]

FULL = 1.0 - 1e-9
RANDOM_SEEDS = 2  # random-policy episodes per task


@dataclass(slots=True)
class CheckContext:
    """What every check works on: the environment, its sampled tasks and the server's limits."""

    entry: EnvironmentEntry
    split: str
    tasks: list[Task]
    limits: LimitSettings
    seed: int = 0


class ReferencePolicy:
    """Plays the environment's `reference_solution()`; `offered` says whether it gave one."""

    def __init__(self) -> None:
        self.queue: list[dict[str, Any]] | None = None
        self.offered = False

    def __call__(self, env: Environment) -> dict[str, Any] | None:
        if self.queue is None:
            solution = env.reference_solution()
            self.offered = solution is not None
            self.queue = [dict(turn) for turn in solution or []]
        return self.queue.pop(0) if self.queue else None


def _verdict(name: str, episodes: list[Episode], what: str) -> CheckResult:
    """The generic probes' rule (module docstring)."""
    rewards = [episode.reward for episode in episodes]
    errors = [episode.error for episode in episodes if episode.error]
    data: dict[str, Any] = {"rewards": rewards}
    if errors:
        return CheckResult(name=name, status="fail", detail=f"the environment raised: {errors[0]}", data=data)
    mean = statistics.fmean(rewards) if rewards else 0.0
    status: Status = "fail" if mean >= 0.5 else "warn" if any(r > 0 for r in rewards) else "pass"
    detail = f"{what}: mean reward {mean:.2f} over {len(rewards)} tasks"
    return CheckResult(name=name, status=status, detail=detail, data=data)


async def determinism(ctx: CheckContext) -> CheckResult:
    """Same split and seed draw the same task; same task and seed open the same episode; the verifier
    gives the same score to the same transcript twice."""
    entry, problems = ctx.entry, []
    if entry.draw(ctx.split, ctx.seed).id != entry.draw(ctx.split, ctx.seed).id:
        problems.append(f"the same seed drew two different tasks from {ctx.split}")
    for task in ctx.tasks[:2]:
        again = entry.dataset.get(task.id)
        if again is None or (again.prompt, again.answer) != (task.prompt, task.answer):
            problems.append(f"task {task.id} is not the same when read again")
        try:
            starts = [await with_env(entry, task, ctx.seed, ctx.limits, _start) for _ in range(2)]
        except Exception as exc:  # reported, like any other problem
            problems.append(f"task {task.id}: reset raised {type(exc).__name__}: {str(exc)[:160]}")
            continue
        if starts[0] != starts[1]:
            problems.append(f"task {task.id}, seed {ctx.seed}: two resets opened differently")
        rewards = [
            (await play(entry, task, ctx.seed, random_policy(random.Random(7)), ctx.limits)).reward
            for _ in range(2)
        ]
        if rewards[0] != rewards[1]:
            problems.append(
                f"task {task.id}: the same random transcript scored {rewards[0]} then {rewards[1]}"
            )
    if problems:
        return CheckResult(name="determinism", status="fail", detail="; ".join(problems[:3]))
    detail = f"{min(2, len(ctx.tasks))} tasks: same draw, same opening and tools, same score twice"
    return CheckResult(name="determinism", status="pass", detail=detail)


async def _start(env: Environment) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return list(env.messages), env.tools()


async def reference(ctx: CheckContext) -> tuple[CheckResult, list[list[dict[str, Any]]]]:
    """The environment's reference solution scores 1 on every sampled task; returns the turns played."""
    played: list[list[dict[str, Any]]] = []
    problems = []
    for task in ctx.tasks:
        policy = ReferencePolicy()
        episode = await play(ctx.entry, task, ctx.seed, policy, ctx.limits, max_turns=64)
        if not policy.offered:
            return CheckResult(name="reference", status="skip", detail="no reference_solution()"), []
        assistant = [m for m in episode.messages if m.get("role") == "assistant"]
        played.append(assistant)
        if episode.error or episode.reward < FULL:
            why = episode.error or (episode.result.info if episode.result else {})
            problems.append(f"{task.id}: reward {episode.reward:g} ({str(why)[:120]})")
    if problems:
        return CheckResult(name="reference", status="fail", detail="; ".join(problems[:3])), played
    return CheckResult(name="reference", status="pass", detail=f"1.0 on all {len(ctx.tasks)} tasks"), played


async def generic_probes(ctx: CheckContext, references: list[list[dict[str, Any]]]) -> list[CheckResult]:
    """Empty answer, prompt echo, tool spam, and (with two different references) a hedged answer."""
    results = []
    empty = [await play(ctx.entry, task, ctx.seed, scripted([_say("")]), ctx.limits) for task in ctx.tasks]
    results.append(_verdict("probe:empty", empty, "an empty answer"))
    echoes = [
        await play(ctx.entry, task, ctx.seed, scripted([_say(_prompt_text(task))]), ctx.limits)
        for task in ctx.tasks
    ]
    results.append(_verdict("probe:prompt-echo", echoes, "the prompt echoed back"))
    results.append(await _tool_spam(ctx))
    results.append(await _hedged(ctx, references))
    return results


def _say(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def _prompt_text(task: Task) -> str:
    if isinstance(task.prompt, str):
        return task.prompt
    return "\n".join(str(message.get("content") or "") for message in task.prompt)


async def _tool_spam(ctx: CheckContext) -> CheckResult:
    names = [tool["function"]["name"] for tool in ctx.entry.cls.catalog_tools()]
    if not names:
        return CheckResult(name="probe:tool-spam", status="skip", detail="the environment declares no tools")
    count = ctx.limits.max_tool_calls_per_turn + 2
    calls = []
    for index in range(count):
        name = (*names, "no_such_tool")[index % (len(names) + 1)]
        arguments = "{not json" if index % 5 == 4 else "{}"
        calls.append({"type": "function", "function": {"name": name, "arguments": arguments}})
    turn = {"role": "assistant", "content": None, "tool_calls": calls}
    episodes = [
        await play(ctx.entry, task, ctx.seed, scripted([turn, turn, _say("")]), ctx.limits)
        for task in ctx.tasks[:2]
    ]
    return _verdict(
        "probe:tool-spam", episodes, f"{count} calls a turn (every tool, an unknown one, bad JSON)"
    )


async def _hedged(ctx: CheckContext, references: list[list[dict[str, Any]]]) -> CheckResult:
    """Both of two tasks' reference answers in one reply, on each task: a hedge must not pay."""
    if not ctx.entry.cls.hedge_probe:
        detail = "the environment says two answers in one reply are no hedge (hedge_probe = False)"
        return CheckResult(name="probe:hedged", status="skip", detail=detail)
    finals = [turns[-1] for turns in references if turns]
    answers = [str(m.get("content") or "") for m in finals if not m.get("tool_calls") and m.get("content")]
    pairs = [
        (task, answers[i], answers[(i + 1) % len(answers)])
        for i, task in enumerate(ctx.tasks[: len(answers)])
        if len(answers) > 1 and answers[i].strip() != answers[(i + 1) % len(answers)].strip()
    ]
    if not pairs:
        detail = "needs a reference solution ending in a plain answer, different on two tasks"
        return CheckResult(name="probe:hedged", status="skip", detail=detail)
    episodes = []
    for task, own, other in pairs:
        for text in (f"{own}\n\nor\n\n{other}", f"{other}\n\nor\n\n{own}"):
            episodes.append(await play(ctx.entry, task, ctx.seed, scripted([_say(text)]), ctx.limits))
    result = _verdict("probe:hedged", episodes, "its reference answer and another task's together")
    if any(episode.reward >= FULL for episode in episodes):
        result.status, result.detail = "fail", result.detail + "; a hedge earned full reward"
    return result


async def own_probes(ctx: CheckContext) -> list[CheckResult]:
    """The environment's `hack_probes()` (kind `hack`) and the sandbox check (kind `sandbox`)."""
    task = ctx.tasks[0]
    try:
        probes: list[HackProbe] = await with_env(ctx.entry, task, ctx.seed, ctx.limits, _probes)
    except Exception as exc:  # reported, like any other problem
        detail = f"hack_probes() (or reset) raised {type(exc).__name__}: {str(exc)[:160]}"
        return [CheckResult(name="probe:own", status="fail", detail=detail)]
    hacks = [probe for probe in probes if probe.kind == "hack"]
    attacks = [probe for probe in probes if probe.kind == "sandbox"]
    results = []
    if hacks:
        results.append(await _play_probes("probe:own", ctx, task, hacks))
    else:
        results.append(CheckResult(name="probe:own", status="skip", detail="no hack_probes() of its own"))
    if attacks:
        results.append(await _play_probes("sandbox", ctx, task, attacks))
    else:
        detail = "no sandbox probes (hack_probes() of kind sandbox): runs no code, or declares none"
        results.append(CheckResult(name="sandbox", status="skip", detail=detail))
    return results


async def _probes(env: Environment) -> list[HackProbe]:
    return env.hack_probes()


async def _play_probes(name: str, ctx: CheckContext, task: Task, probes: list[HackProbe]) -> CheckResult:
    problems, data = [], {}
    for probe in probes:
        started = time.perf_counter()
        episode = await play(ctx.entry, task, ctx.seed, scripted(probe.messages), ctx.limits, max_turns=64)
        data[probe.name] = {"reward": episode.reward, "seconds": round(time.perf_counter() - started, 2)}
        if episode.error:
            problems.append(f"{probe.name}: the environment raised: {episode.error}")
        elif episode.reward > probe.max_reward + 1e-9:
            problems.append(f"{probe.name}: reward {episode.reward:g} > {probe.max_reward:g} ({probe.why})")
        elif probe.expect is not None and probe.expect not in episode.last_tool:
            problems.append(
                f"{probe.name}: the last tool message lacks {probe.expect!r}: {episode.last_tool[:80]!r}"
            )
    if problems:
        return CheckResult(name=name, status="fail", detail="; ".join(problems[:3]), data=data)
    detail = f"{len(probes)} held: " + ", ".join(probe.name for probe in probes)
    return CheckResult(name=name, status="pass", detail=detail, data=data)


async def spread_and_throughput(ctx: CheckContext) -> list[CheckResult]:
    """Rewards of the random baseline policy (no learnable signal when all are equal), and its speed."""
    rewards, errors = [], []
    started = time.perf_counter()
    for task in ctx.tasks:
        for seed in range(RANDOM_SEEDS):
            policy: Policy = random_policy(random.Random(f"{task.id}\x00{seed}"))
            episode = await play(ctx.entry, task, ctx.seed + seed, policy, ctx.limits)
            rewards.append(episode.reward)
            if episode.error:
                errors.append(episode.error)
    elapsed = time.perf_counter() - started
    data = {
        "episodes": len(rewards),
        "mean": round(statistics.fmean(rewards), 4) if rewards else 0.0,
        "std": round(statistics.pstdev(rewards), 4) if rewards else 0.0,
        "zeros": sum(1 for r in rewards if r <= 0.0),
        "ones": sum(1 for r in rewards if r >= FULL),
    }
    if errors:
        spread = CheckResult(
            name="spread", status="fail", detail=f"the environment raised: {errors[0]}", data=data
        )
    elif len(set(rewards)) <= 1:
        value = rewards[0] if rewards else 0.0
        detail = f"no learnable signal from the random baseline: all {len(rewards)} episodes scored {value:g}"
        spread = CheckResult(name="spread", status="warn", detail=detail, data=data)
    else:
        detail = f"random baseline: mean {data['mean']:.2f} ± {data['std']:.2f} over {len(rewards)} episodes"
        spread = CheckResult(name="spread", status="pass", detail=detail, data=data)
    rate = len(rewards) / elapsed if elapsed > 0 else 0.0
    throughput = CheckResult(
        name="throughput",
        status="pass",
        detail=f"{rate:.1f} episodes/s (random policy, in process, one at a time)",
        data={"episodes_per_s": round(rate, 2), "episodes": len(rewards), "seconds": round(elapsed, 3)},
    )
    return [spread, throughput]
