"""The `math` environment: golden transcripts, determinism, the dataset and its oracle, timeouts."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from gym_env_math import generate
from gym_env_math.env import SYSTEM_PROMPT, MathEnv
from gym_server.sdk.environment import VerifyResult
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import Registry
from gym_server.sdk.tasks import Task
from gym_verifiers.math import close_shared_pool

FIXTURES = Path(__file__).resolve().parent.parent / "gym_env_math" / "fixtures" / "golden.jsonl"
GOLDEN = [json.loads(line) for line in FIXTURES.read_text(encoding="utf-8").splitlines() if line.strip()]
TASKS = MathEnv.dataset().tasks()


@pytest.fixture(scope="module", autouse=True)
def _close_math_pool() -> Iterator[None]:
    yield
    close_shared_pool()


def _task(task_id: str) -> Task:
    task = MathEnv.dataset().get(task_id)
    assert task is not None
    return task


async def _play(task: Task, *messages: dict[str, Any], seed: int | None = 0) -> tuple[MathEnv, VerifyResult]:
    """Reset, step each message as the server receives it (validated), then verify."""
    env = MathEnv(task, seed)
    await env.reset()
    for message in messages:
        if env.done:
            break
        await env.step(Message.model_validate(message).to_dict())
    return env, await env.verify()


@pytest.mark.parametrize("case", GOLDEN, ids=[case["name"] for case in GOLDEN])
async def test_golden_transcripts(case: dict[str, Any]) -> None:
    env, result = await _play(_task(case["task_id"]), *case["messages"], seed=case["seed"])
    assert env.done
    assert result.reward == pytest.approx(case["expected_reward"])
    assert result.failure == case["expected_failure"]
    for name, value in case["expected_components"].items():
        assert result.components[name] == pytest.approx(value), name
    assert result.info["explanation"]
    _, again = await _play(_task(case["task_id"]), *case["messages"], seed=case["seed"])
    assert again == result  # deterministic


def test_golden_transcripts_cover_full_zero_and_malformed() -> None:
    assert {case["kind"] for case in GOLDEN} >= {"full", "zero", "malformed"}


async def test_opening_messages_are_deterministic_and_hide_the_answer() -> None:
    task = TASKS[0]
    first, second = MathEnv(task, 1), MathEnv(task, 1)
    opening = await first.reset()
    assert opening == await second.reset()
    assert opening[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert opening[1] == {"role": "user", "content": task.prompt}
    assert "answer" not in task.public()


async def test_verify_before_any_answer_is_zero_not_an_error() -> None:
    env = MathEnv(TASKS[0], 0)
    await env.reset()
    result = await env.verify()
    assert result.reward == 0.0 and result.failure is None


def test_dataset_shape() -> None:
    splits = MathEnv.dataset().split_sizes()
    assert splits["train"] >= 300 and splits["validation"] >= 100
    ids = [task.id for task in TASKS]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"math-\d{5}", task_id) for task_id in ids)
    families = Counter(task.metadata["family"] for task in TASKS)
    assert set(families) == set(generate.FAMILIES)
    assert min(families.values()) >= 30
    assert all(isinstance(task.answer, str) and task.answer for task in TASKS)
    assert len({task.prompt for task in TASKS}) == len(TASKS)


def test_dataset_is_reproducible_from_the_generator() -> None:
    folder = Path(MathEnv.dataset().folder)
    for split, text in generate.render().items():
        assert (folder / f"{split}.jsonl").read_text(encoding="utf-8") == text, (
            f"{split} is stale: regenerate"
        )
    assert generate.render(seed=1) != generate.render()


async def test_oracle_scores_one_on_every_task() -> None:
    """Every reference, boxed, verifies against itself: the dataset's answers all parse and compare."""

    async def oracle(task: Task) -> tuple[str, VerifyResult]:
        _, result = await _play(task, {"role": "assistant", "content": f"\\boxed{{{task.answer}}}"})
        return task.id, result

    results = await asyncio.gather(*(oracle(task) for task in TASKS))
    failed = {task_id: result.info["explanation"] for task_id, result in results if result.reward != 1.0}
    assert not failed


async def test_an_off_by_one_answer_scores_zero() -> None:
    integer_tasks = [task for task in TASKS if re.fullmatch(r"-?\d+", str(task.answer))][:40]
    for task in integer_tasks:
        _, result = await _play(task, {"role": "assistant", "content": f"\\boxed{{{int(task.answer) + 1}}}"})
        assert result.reward == 0.0, task.id


async def test_restating_the_problem_scores_zero() -> None:
    """The expression a `Compute $...$` task shows equals its answer, but it is no answer (issue 17, C11)."""
    echoes = [
        (task, re.fullmatch(r"Compute \$(.+?)\$\..*", str(task.prompt), re.DOTALL))
        for task in TASKS
        if task.metadata["family"] in ("arithmetic", "fractions")
    ]
    assert len(echoes) >= 60
    for task, match in echoes:
        assert match is not None, task.prompt
        _, result = await _play(task, {"role": "assistant", "content": f"\\boxed{{{match[1]}}}"})
        assert result.reward == 0.0, (task.id, result.info["explanation"])
        assert result.components["extracted"] == 1.0


async def test_fraction_tasks_want_lowest_terms_and_no_decimals() -> None:
    fractions = [task for task in TASKS if task.metadata["family"] == "fractions"]
    assert all(task.metadata["answer_form"] == "fraction" for task in fractions)
    for task in fractions[:20]:
        value = Fraction(re.sub(r"\\frac\{(\d+)\}\{(\d+)\}", r"\1/\2", str(task.answer)))
        doubled = f"\\frac{{{2 * value.numerator}}}{{{2 * value.denominator}}}"
        _, result = await _play(task, {"role": "assistant", "content": f"\\boxed{{{doubled}}}"})
        assert result.reward == 0.0, (task.id, doubled)
        if value.denominator in (2, 4, 5, 8, 10, 20, 25, 40, 50):
            _, result = await _play(task, {"role": "assistant", "content": f"\\boxed{{{float(value)}}}"})
            assert result.reward == 0.0, (task.id, float(value))


async def test_pathological_answer_times_out_instead_of_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MathEnv, "verify_timeout_s", 0.5)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    # A power tower is not a number, so the form check refuses it unparsed; with the check off
    # (`answer_form: any`), it reaches math-verify, which spins until the worker is killed.
    unchecked = TASKS[0].model_copy(update={"metadata": {"answer_form": "any"}})
    _, result = await _play(unchecked, {"role": "assistant", "content": "\\boxed{9^{9^{9^{9^{9}}}}}"})
    task.cancel()
    assert time.monotonic() - started < 5.0
    assert result.failure == "verify_timeout" and result.reward == 0.0
    assert ticks >= 20  # the event loop kept running while the worker spun
    _, recovered = await _play(TASKS[0], {"role": "assistant", "content": f"\\boxed{{{TASKS[0].answer}}}"})
    assert recovered.reward == 1.0


def test_registered_through_the_entry_point() -> None:
    registry = Registry.discover()
    assert "math" in registry
    entry = registry.get("math")
    assert entry.cls is MathEnv
    assert entry.verifier_version == MathEnv.verifier_version
    assert not MathEnv.multi_turn and MathEnv.max_turns == 1
