"""`BusyTimeSampler`: how long a policy server was busy, measured around the sampler that calls it.

Asynchronous rollouts (docs/rollout-buffer.md) promise that generation and training overlap; whether
they do is a matter of two numbers, the share of the wall time each side is busy. The training side's
is the trainer's own step time; the generation side's is the time at least one sample request is in
flight, which only the caller sees (a CPU vLLM batches whatever is in flight, so the union of the
requests' intervals, not their sum, is the time it worked).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from gym_trainer.samplers.base import SamplingParams, TokenSample, TokenSampler

__all__ = ["BusyTimeSampler"]


class BusyTimeSampler:
    """A `TokenSampler` that passes every call to `inner` and adds up the time one was in flight.

    Token-exactness, the description and the weight version are `inner`'s: the driver records the
    policy as if it called `inner` directly. `clock` is the time source (a test's hand-moved one).
    """

    def __init__(self, inner: TokenSampler, clock: Callable[[], float] = time.perf_counter) -> None:
        self.inner = inner
        self.token_exact = inner.token_exact
        self.busy_s = 0.0
        self._clock = clock
        self._in_flight = 0
        self._since = 0.0

    def __repr__(self) -> str:
        return f"BusyTimeSampler({self.inner!r}, busy_s={self.busy_s:.3f})"

    @property
    def weight_version(self) -> str | None:
        return self.inner.weight_version

    @weight_version.setter
    def weight_version(self, value: str | None) -> None:
        self.inner.weight_version = value

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        if self._in_flight == 0:
            self._since = self._clock()
        self._in_flight += 1
        try:
            return await self.inner.sample(prompt_ids, params, stop_token_ids)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.busy_s += self._clock() - self._since
