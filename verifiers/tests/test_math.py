"""The math verifier under load and attack: pathological input times out or is refused, never hangs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from gym_server.workers import WorkerPool
from gym_verifiers.format import MAX_TEXT_CHARS
from gym_verifiers.math import (
    MAX_ANSWER_CHARS,
    close_shared_pool,
    create_pool,
    math_match,
    math_match_sync,
    shared_pool,
)

TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with create_pool(size=2) as created:
        created.start()
        yield created


@pytest.mark.parametrize(
    "answer",
    [
        "9^{9^{9^{9^{9}}}}",
        "9^9^9^9^9",
        "(10^{10})!",
        "1000000!",
        "10^{10^{10}}",
        "\\frac{\\frac{\\frac{\\frac{\\frac{\\frac{1}{2}}{2}}{2}}{2}}{2}}{2}" * 8,
        "(" * 300 + "1" + ")" * 300,
        "\\sqrt{" * 35 + "2" + "}" * 35,
    ],
    ids=[
        "tower",
        "flat_tower",
        "factorial_of_power",
        "big_factorial",
        "power_tower",
        "frac_chain",
        "parens",
        "sqrts",
    ],
)
def test_pathological_answers_time_out_or_finish(pool: WorkerPool, answer: str) -> None:
    started = time.monotonic()
    result = math_match_sync(f"\\boxed{{{answer}}}", "2", pool=pool, timeout_s=TIMEOUT_S, form="any")
    assert time.monotonic() - started < TIMEOUT_S + 3.0
    assert result.score == 0.0
    assert result.failure in (None, "verify_timeout")


def test_power_tower_is_a_verify_timeout_sync_and_async(pool: WorkerPool) -> None:
    tower = "\\boxed{9^{9^{9^{9}}}}"
    sync = math_match_sync(tower, "2", pool=pool, timeout_s=TIMEOUT_S, form="any")
    assert sync.failure == "verify_timeout"
    result = asyncio.run(math_match(tower, "2", pool=pool, timeout_s=TIMEOUT_S, form="any"))
    assert result.failure == "verify_timeout"
    assert result.components == {"correct": 0.0, "extracted": 1.0, "hedged": 0.0}
    assert math_match_sync("\\boxed{2}", "2", pool=pool).score == 1.0  # the pool recovered


@pytest.mark.parametrize(
    ("completion", "why"),
    [
        ("x" * (MAX_TEXT_CHARS + 1) + "\\boxed{2}", "longer than"),
        ("\\boxed{" + "1" * (MAX_TEXT_CHARS - 100) + "}", "longer than"),
        ("\\boxed{" + "{" * 200 + "2" + "}" * 200 + "}", "nests braces"),
        ("\\boxed{" * 100_000, "no final answer"),
        ("\\boxed{1} " * 9, ""),
    ],
    ids=["over_limit", "megabyte_box", "brace_bomb", "unclosed_boxes", "repeated_same_box"],
)
def test_size_limits_refuse_without_a_worker(completion: str, why: str) -> None:
    started = time.monotonic()
    result = math_match_sync(completion, "2", pool=None, timeout_s=TIMEOUT_S)
    assert time.monotonic() - started < 3.0
    assert result.score == 0.0 and result.failure is None
    assert why in result.explanation


def test_long_reasoning_with_a_small_answer_is_fine(pool: WorkerPool) -> None:
    completion = "Let us think. " * 60_000 + "So the answer is \\boxed{\\frac{7}{2}}."
    assert len(completion) > 800_000
    assert math_match_sync(completion, "3.5", pool=pool).score == 1.0


def test_answer_size_limit_is_documented_constant() -> None:
    result = math_match_sync("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}", "1")
    assert "refused unparsed" in result.explanation


def test_spraying_many_boxes_scores_zero() -> None:
    completion = " ".join(f"\\boxed{{{n}}}" for n in range(20))
    result = math_match_sync(completion, "7")
    assert result.score == 0.0 and result.components["hedged"] == 1.0


async def test_concurrent_calls_are_correct_and_the_loop_keeps_ticking(pool: WorkerPool) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    right = [math_match(f"\\boxed{{{n}/4}}", f"{n / 4}", pool=pool, form="any") for n in range(1, 25)]
    slow = math_match("\\boxed{9^{9^{9^{9}}}}", "2", pool=pool, timeout_s=TIMEOUT_S, form="any")
    results = await asyncio.gather(slow, *right)
    task.cancel()
    assert results[0].failure == "verify_timeout"
    assert all(result.score == 1.0 for result in results[1:])
    assert ticks >= 20  # 0.5 s of timeout without a blocked loop


async def test_pool_closing_mid_call_is_verify_crashed() -> None:
    pool = create_pool(size=1)
    tower = "\\boxed{9^{9^{9^{9}}}}"
    call = asyncio.create_task(math_match(tower, "2", pool=pool, timeout_s=10.0, form="any"))
    await asyncio.sleep(1.0)
    await asyncio.to_thread(pool.close)
    result = await call
    assert result.failure == "verify_crashed"


def test_shared_pool_is_lazy_reused_and_recreated_after_close() -> None:
    close_shared_pool()
    first = shared_pool()
    assert shared_pool() is first
    assert math_match_sync("\\boxed{42}", "42").score == 1.0
    close_shared_pool()
    assert first.closed
    assert shared_pool() is not first
    close_shared_pool()
