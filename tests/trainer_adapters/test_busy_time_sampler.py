"""`BusyTimeSampler`: the time a policy server had at least one request in flight, on a clock the test
moves by hand (no wall-clock thresholds)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from gym_trainer.samplers import BusyTimeSampler, SamplingParams, TokenSample


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class GatedSampler:
    """Answers each request when the test opens its gate."""

    token_exact = True

    def __init__(self) -> None:
        self.weight_version: str | None = "3"
        self.gates: list[asyncio.Event] = []
        self.closed = False

    def describe(self) -> dict[str, Any]:
        return {"model": "gated", "weight_version": self.weight_version}

    async def aclose(self) -> None:
        self.closed = True

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        if not prompt_ids:
            raise RuntimeError("no prompt")
        return TokenSample(token_ids=[7], logprobs=[-0.5], finish_reason="stop")


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_overlapping_requests_count_once_and_idle_time_not_at_all() -> None:
    clock = Clock()
    inner = GatedSampler()
    sampler = BusyTimeSampler(inner, clock)
    params = SamplingParams(max_tokens=4)

    first = asyncio.create_task(sampler.sample([1], params, []))
    await _settle()
    clock.now += 2.0
    second = asyncio.create_task(sampler.sample([1], params, []))
    await _settle()
    clock.now += 3.0
    inner.gates[0].set()
    await first
    clock.now += 1.0
    inner.gates[1].set()
    assert (await second).token_ids == [7]
    assert sampler.busy_s == pytest.approx(6.0)  # one interval, 100 -> 106, not 5 + 4

    clock.now += 50.0  # nothing in flight: not counted
    failing = asyncio.create_task(sampler.sample([], params, []))
    await _settle()
    clock.now += 0.5
    inner.gates[2].set()
    with pytest.raises(RuntimeError):
        await failing
    assert sampler.busy_s == pytest.approx(6.5)  # a failed request was in flight too


async def test_it_is_the_inner_sampler_to_the_driver() -> None:
    inner = GatedSampler()
    sampler = BusyTimeSampler(inner)
    assert sampler.token_exact and sampler.describe() == {"model": "gated", "weight_version": "3"}
    sampler.weight_version = "4"  # what GymRolloutFunc sets each step reaches the recorded policy
    assert inner.weight_version == "4" and sampler.weight_version == "4"
    await sampler.aclose()
    assert inner.closed
