"""A CPU stand-in for OpenRLHF's vLLM rollout actor, backed by a transformers model in this process.

OpenRLHF's agent executors call `llm_engine.generate(prompt_token_ids, sampling_params,
multi_modal_data=None)` on its `RolloutRayActor`, which needs vLLM and a GPU. `LocalEngine` answers the
same call with the gym's `LocalSampler` (token ids in, token ids and processed logprobs out) and returns
vLLM's shapes: `.outputs[0]` with `token_ids`, `text`, `finish_reason` and, when `sampling_params.logprobs`
is set, `logprobs` as one `{token_id: Logprob}` dict per sampled token. `SamplingParams` has the fields
of vLLM's that OpenRLHF sets. For tests and for debugging an agent module on a laptop, not for training.
It needs transformers >= 5.24 (the gym's generation reads the `cache` output), newer than the 5.15.0
OpenRLHF 0.11.2 pins for its vLLM path; the agent module itself only tokenizes and works with either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_trainer.samplers.base import SamplingParams as GymSamplingParams
from gym_trainer.samplers.local import LocalSampler

__all__ = ["CompletionOutput", "LocalEngine", "Logprob", "RequestOutput", "SamplingParams"]


@dataclass
class SamplingParams:
    """The fields of `vllm.SamplingParams` that OpenRLHF's rollout sets (mutable, as vLLM's are)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = None
    min_tokens: int = 1
    skip_special_tokens: bool = False
    logprobs: int | None = None
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Logprob:
    logprob: float


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list[dict[int, Logprob]] | None


@dataclass(frozen=True, slots=True)
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class LocalEngine:
    """`generate` of OpenRLHF's rollout actor over an in-process causal LM.

    Args:
        model: a transformers causal LM.
        tokenizer: its tokenizer (detokenizes, as vLLM does, and gives the end-of-sequence id).
        stop_token_ids: where a turn ends besides `sampling_params.stop_token_ids` (default: the
            tokenizer's eos, as vLLM stops on the model's eos).
    """

    def __init__(self, model: Any, tokenizer: Any, stop_token_ids: Sequence[int] | None = None) -> None:
        self.tokenizer = tokenizer
        self.sampler = LocalSampler(
            model, int(tokenizer.pad_token_id), name=str(tokenizer.name_or_path or "local")
        )
        self.stop_token_ids = (
            list(stop_token_ids) if stop_token_ids is not None else [int(tokenizer.eos_token_id)]
        )

    async def aclose(self) -> None:
        await self.sampler.aclose()

    async def generate(
        self, prompt_token_ids: Sequence[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> RequestOutput:
        if multi_modal_data:
            raise ValueError("LocalEngine samples text only")
        params = GymSamplingParams(
            max_tokens=max(1, int(sampling_params.max_tokens or 1)),
            temperature=float(sampling_params.temperature),
            top_p=float(sampling_params.top_p),
            seed=sampling_params.seed,
        )
        stops = [*self.stop_token_ids, *(getattr(sampling_params, "stop_token_ids", None) or [])]
        sample = await self.sampler.sample(list(prompt_token_ids), params, stops)
        text = self.tokenizer.decode(
            sample.token_ids, skip_special_tokens=bool(sampling_params.skip_special_tokens)
        )
        logprobs = None
        if sampling_params.logprobs is not None:
            logprobs = [
                {token: Logprob(lp)} for token, lp in zip(sample.token_ids, sample.logprobs, strict=True)
            ]
        output = CompletionOutput(list(sample.token_ids), text, sample.finish_reason, logprobs)
        return RequestOutput(list(prompt_token_ids), [output])
