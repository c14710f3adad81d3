"""Audit every reasoning-gym generator; the ones that pass are what `reasoning_gym/*` registers.

    python -m gym_env_reasoning_gym.audit            # all generators -> audit.json
    python -m gym_env_reasoning_gym.audit gcd lcm    # only these (merged into the file)

A generator is offered only when the environment built on it (extraction, the strict rules and the
generator's own scorer: what a model is actually scored by) passes, on `ITEMS` validation tasks:

- **gold**: the reference answer in `<answer>` tags scores 1, at every curriculum level offered;
- **wrong**: the reference with its first digit or letter changed (a boolean flipped) and a nonsense
  answer score below 1 (not another task's reference: puzzles with several solutions rightly accept it);
- **hedged**: two answer blocks, `gold or other` and `other, gold` in one block (other: another task's
  different reference, else the changed one) all score 0;
- **determinism**: the same task id generates the same question and answer from a fresh dataset in this
  process, and in a second interpreter with another `PYTHONHASHSEED` (set iteration order differs);
- **speed**: the whole audit of a generator ends within `TIMEOUT_S` (it runs in a forked child that is
  killed past it), so a generator that hangs, needs the network or is slow is recorded, not offered.

Levels: level 0 gets every check; each higher level the curriculum defines is offered while reasoning-gym
accepts its configuration and gold and determinism hold there, in order, within the time budget; the
highest such level is the generator's `max_level`. The result is written to `audit.json` beside this
module, committed, and read by `environments()` at registration, so a server start never re-audits (or
even imports reasoning-gym, which takes seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import Any

from pydantic import BaseModel, ConfigDict

from gym_env_reasoning_gym.env import (
    AUDIT_FILE,
    DESCRIPTIONS,
    ReasoningGymDataset,
    ReasoningGymEnv,
    environment_class,
    task_id,
)
from gym_server.sdk.tasks import Task

__all__ = ["ITEMS", "TIMEOUT_S", "GeneratorAudit", "audit_generator", "fingerprints", "main"]

ITEMS = 6  # validation tasks per level audited
TIMEOUT_S = 120.0  # per generator, every level included
LEVEL_BUDGET_S = 20.0  # no further level is started past this much time
MODULE = "gym_env_reasoning_gym.audit"
HASH_SEED = "20260101"  # the second interpreter's PYTHONHASHSEED
NONSENSE = "I cannot determine this."


class GeneratorAudit(BaseModel):
    """One generator's verdict, as stored in `audit.json`."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    reason: str | None = None
    description: str = ""
    max_level: int = 0
    levels_defined: int = 0
    fingerprint: str = ""
    generate_ms: float = 0.0
    seconds: float = 0.0


def _rg() -> Any:
    return importlib.import_module("reasoning_gym.factory")


def _description(generator: str, dataset_cls: type) -> str:
    if generator in DESCRIPTIONS:
        return DESCRIPTIONS[generator]
    doc = (dataset_cls.__doc__ or "").strip().splitlines()
    line = doc[0].strip().rstrip(".") if doc else generator.replace("_", " ")
    return f"{line}." if line else generator


def _fingerprint(tasks: Iterable[Task]) -> str:
    digest = hashlib.sha256()
    for task in tasks:
        digest.update(json.dumps([task.id, task.prompt, task.answer], sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


async def _score(cls: type[ReasoningGymEnv], task: Task, content: str) -> float:
    env = cls(task, 0)
    await env.reset()
    await env.step({"role": "assistant", "content": content})
    return (await env.verify()).reward


def _gold(task: Task) -> str:
    answer = task.answer
    return str(answer.get("answer") if isinstance(answer, dict) else answer)


async def _probe_level_zero(cls: type[ReasoningGymEnv], tasks: list[Task]) -> str | None:
    """The wrong-answer and hedging probes; the first violation found, else None."""
    golds = [_gold(task) for task in tasks]
    for index, task in enumerate(tasks):
        gold = golds[index]
        changed = _perturb(gold)
        others = [other for other in golds if " ".join(other.split()) != " ".join(gold.split())]
        wrong = others[0] if others else changed
        for answer in (changed, NONSENSE):
            score = await _score(cls, task, f"<answer>{answer}</answer>")
            if score >= 1.0:
                return f"wrong answer {answer[:40]!r} scored 1 on {task.id}"
        hedges = (
            f"<answer>{gold}</answer> or <answer>{wrong}</answer>",
            f"<answer>{gold} or {wrong}</answer>",
            f"<answer>{wrong}, {gold}</answer>",
        )
        for hedge in hedges:
            score = await _score(cls, task, hedge)
            if score > 0.0:
                return f"hedged answer {hedge[:60]!r} scored {score:.3g} on {task.id}"
    return None


def _perturb(gold: str) -> str:
    """The reference with its first digit (else its first letter) changed, or a boolean flipped: a
    clear miss (the last digit would not do: tolerant scorers rightly accept 2.83398 for 2.83399)."""
    flips = {"true": "False", "false": "True", "yes": "No", "no": "Yes"}
    if gold.strip().lower() in flips:
        return flips[gold.strip().lower()]
    for wanted in (str.isdigit, str.isalpha):
        for index, char in enumerate(gold):
            if wanted(char):
                changed = (
                    str((int(char) + 5) % 10) if char.isdigit() else ("b" if char.lower() == "a" else "a")
                )
                return gold[:index] + changed + gold[index + 1 :]
    return gold + "1"


async def _audit_level(cls: type[ReasoningGymEnv], generator: str, level: int, top: int) -> str | None:
    """Gold and in-process determinism at one level; a violation, else None."""
    first = ReasoningGymDataset(generator, level, levels=top)
    second = ReasoningGymDataset(generator, level, levels=top)
    for index in range(ITEMS):
        identifier = task_id(generator, level, "validation", index)
        task, again = first.get(identifier), second.get(identifier)
        if task is None or again is None:
            return f"task {identifier} not generated"
        if (task.prompt, task.answer) != (again.prompt, again.answer):
            return f"not deterministic: {identifier} differs between two datasets with the same seed"
        gold = _gold(task)
        if gold in ("", "None"):
            return f"no reference answer on {identifier} (the scorer validates free-form solutions)"
        score = await _score(cls, task, f"Reasoning.\n<answer>{gold}</answer>")
        if score < 1.0:
            return f"the reference answer scored {score:.3g} on {identifier}"
    return None


def _levels_accepted(generator: str) -> int:
    """How many consecutive curriculum levels reasoning-gym's own config validation accepts."""
    rg = _rg()
    curriculum = rg.create_curriculum(generator)
    defined = max((len(attribute.levels) for attribute in curriculum.attributes.values()), default=1)
    dataset_cls, _ = rg.DATASETS[generator]
    for level in range(defined):
        curriculum.set_global_level(level)
        try:
            dataset_cls(config=curriculum.generate_configuration({"seed": 0, "size": 1}))
        except Exception:  # reasoning-gym validates with assert and ValueError alike
            return level
    return defined


async def audit_generator(generator: str) -> GeneratorAudit:
    """Audit one generator in this process (`main` runs it in a child with a timeout)."""
    started = time.monotonic()
    rg = _rg()
    dataset_cls, _ = rg.DATASETS[generator]
    description = _description(generator, dataset_cls)

    def verdict(reason: str | None = None, **facts: Any) -> GeneratorAudit:
        return GeneratorAudit(
            passed=reason is None,
            reason=reason,
            description=description,
            seconds=round(time.monotonic() - started, 2),
            **facts,
        )

    if generator not in rg.CURRICULA:
        return verdict("no curriculum: reasoning-gym defines no difficulty levels for it")
    try:
        accepted = _levels_accepted(generator)
    except Exception as exc:
        return verdict(f"configuring it raised {type(exc).__name__}: {str(exc)[:120]}")
    if accepted == 0:
        return verdict("reasoning-gym refuses the configuration of its own level 0")
    cls = environment_class(generator, 0, description=description, levels=accepted - 1)
    tasks: list[Task] = []
    try:
        clock = time.monotonic()
        dataset = cls.rg_dataset()
        for index in range(ITEMS):
            task = dataset.get(task_id(generator, 0, "validation", index))
            assert task is not None
            tasks.append(task)
        generate_ms = round((time.monotonic() - clock) * 1000 / ITEMS, 2)
        problem = await _audit_level(cls, generator, 0, accepted - 1) or await _probe_level_zero(cls, tasks)
    except Exception as exc:
        return verdict(f"level 0 raised {type(exc).__name__}: {str(exc)[:120]}")
    if problem is not None:
        return verdict(problem, levels_defined=accepted)
    top = 0
    for level in range(1, accepted):
        if time.monotonic() - started > LEVEL_BUDGET_S:
            break
        try:
            if await _audit_level(cls, generator, level, accepted - 1) is not None:
                break
        except Exception:
            break
        top = level
    return verdict(
        None,
        max_level=top,
        levels_defined=accepted,
        fingerprint=_fingerprint(tasks),
        generate_ms=generate_ms,
    )


def _child(generator: str, pipe: Connection) -> None:
    try:
        result = asyncio.run(audit_generator(generator))
    except BaseException as exc:  # the parent must get an answer, whatever broke
        result = GeneratorAudit(passed=False, reason=f"the audit raised {type(exc).__name__}: {exc}"[:200])
    pipe.send(result.model_dump())
    pipe.close()


def _run_all(generators: list[str], jobs: int, timeout_s: float) -> dict[str, GeneratorAudit]:
    """Each generator in a forked child (reasoning-gym imported once, before the forks), `jobs` at once."""
    _rg()
    context = multiprocessing.get_context("fork")
    pending = list(generators)
    running: dict[str, tuple[Any, Connection, float]] = {}
    results: dict[str, GeneratorAudit] = {}
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(name, sender), daemon=True)
            process.start()
            sender.close()
            running[name] = (process, receiver, time.monotonic())
        for name, (process, receiver, start) in list(running.items()):
            if receiver.poll(0.05):
                try:
                    results[name] = GeneratorAudit.model_validate(receiver.recv())
                except EOFError:
                    results[name] = GeneratorAudit(passed=False, reason="the audit process died")
            elif not process.is_alive():
                results[name] = GeneratorAudit(
                    passed=False, reason=f"the audit process exited {process.exitcode}"
                )
            elif time.monotonic() - start > timeout_s:
                process.kill()
                results[name] = GeneratorAudit(passed=False, reason=f"timed out: over {timeout_s:.0f} s")
            else:
                continue
            process.join()
            receiver.close()
            del running[name]
            verdict = results[name]
            print(f"{name}: {'pass' if verdict.passed else 'FAIL ' + str(verdict.reason)}", file=sys.stderr)
    return results


def fingerprints(generators: Iterable[str]) -> dict[str, str]:
    """The level-0 fingerprint of each generator, computed in this process."""
    found = {}
    for generator in generators:
        dataset = ReasoningGymDataset(generator, 0, levels=0)
        tasks = [dataset.get(task_id(generator, 0, "validation", index)) for index in range(ITEMS)]
        found[generator] = _fingerprint(task for task in tasks if task is not None)
    return found


def _cross_process(results: dict[str, GeneratorAudit], timeout_s: float) -> None:
    """Fail the generators whose tasks differ in an interpreter with another hash seed."""
    passed = [name for name, verdict in results.items() if verdict.passed]
    if not passed:
        return
    command = [sys.executable, "-m", MODULE, "--fingerprints", *passed]
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=True)
        other = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as exc:
        raise SystemExit(f"the cross-process determinism check failed to run: {exc}") from exc
    for name in passed:
        if other.get(name) != results[name].fingerprint:
            results[name] = results[name].model_copy(
                update={
                    "passed": False,
                    "reason": "not deterministic across processes (depends on the hash seed)",
                }
            )


def _write(results: dict[str, GeneratorAudit], replace: bool) -> dict[str, Any]:
    previous: dict[str, Any] = {}
    if not replace and AUDIT_FILE.exists():
        previous = json.loads(AUDIT_FILE.read_text(encoding="utf-8")).get("generators", {})
    merged = {**previous, **{name: verdict.model_dump() for name, verdict in results.items()}}
    version = importlib.import_module("importlib.metadata").version("reasoning-gym")
    document = {
        "reasoning_gym": version,
        "items_per_level": ITEMS,
        "timeout_s": TIMEOUT_S,
        "passed": sum(1 for verdict in merged.values() if verdict["passed"]),
        "failed": sum(1 for verdict in merged.values() if not verdict["passed"]),
        "generators": dict(sorted(merged.items())),
    }
    AUDIT_FILE.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("generators", nargs="*", help="only these (default: every registered one)")
    parser.add_argument("--jobs", type=int, default=2, help="generators audited at once")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per generator")
    parser.add_argument("--fingerprints", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fingerprints:  # generators may print: the JSON is the last line
        with contextlib.redirect_stdout(sys.stderr):
            found = fingerprints(args.generators)
        print("\n" + json.dumps(found))
        return 0
    names = args.generators or sorted(_rg().DATASETS)
    results = _run_all(names, args.jobs, args.timeout)
    _write(results, replace=not args.generators)  # kept even if the cross-process step cannot run
    _cross_process(results, timeout_s=max(120.0, 5.0 * len(names)))
    document = _write(results, replace=not args.generators)
    print(f"{document['passed']} passed, {document['failed']} failed; written to {AUDIT_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
