"""Token-exact sampling with a transformers model in this process (training on the CPU or one GPU, tests).

The TRL adapter uses it with the trainer's own model, so rollouts are on-policy without a weight sync.
Concurrent episodes share batches through one `BatchingEngine`, which samples on the model's own device.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gym_trainer.generation import BatchingEngine, GenerationRequest
from gym_trainer.samplers.base import PolicyError, PolicyTimeout, SamplingParams, TokenSample

__all__ = ["LocalSampler"]


class LocalSampler:
    """Samples from an in-process causal LM.

    Args:
        model: a transformers causal LM (the trainer's, when training on-policy).
        pad_id: the tokenizer's padding id.
        name: recorded as the policy's model name.
        max_batch: most episodes sampled in one batch.
        timeout_s: the longest one sample may take (`policy_timeout` after that).
    """

    token_exact = True

    def __init__(
        self,
        model: Any,
        pad_id: int,
        *,
        name: str = "local",
        max_batch: int = 32,
        timeout_s: float = 600.0,
        weight_version: str | None = None,
    ) -> None:
        self.engine = BatchingEngine(model, pad_id, max_batch=max_batch)
        self.name = name
        self.timeout_s = timeout_s
        self.weight_version = weight_version

    def __repr__(self) -> str:
        return f"LocalSampler({self.name!r}, {self.engine!r})"

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "transformers",
            "model": self.name,
            "weight_version": self.weight_version,
            "token_exact": True,
            "device": self.engine.device,
        }

    async def aclose(self) -> None:
        await asyncio.to_thread(self.engine.stop)

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        request = GenerationRequest(
            prompt_ids=list(prompt_ids),
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=params.seed,
            stop_token_ids=tuple(stop_token_ids),
        )
        try:
            output = await asyncio.wait_for(self.engine.generate(request), self.timeout_s)
        except TimeoutError as exc:
            raise PolicyTimeout(f"local sampling took over {self.timeout_s} s") from exc
        except PolicyError:
            raise
        except Exception as exc:
            raise PolicyError(f"local sampling failed: {type(exc).__name__}: {exc}") from exc
        return TokenSample(output.token_ids, output.logprobs, output.finish_reason)
