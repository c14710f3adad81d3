"""A `TokenSampler` over verl's server manager, so the gym's `RolloutDriver` samples through verl.

verl's agent loops generate with `server_manager.generate(request_id, prompt_ids=..., sampling_params=...)`,
which returns a `TokenOutput` (`token_ids`, `log_probs`); on a GPU that is vLLM or SGLang behind verl's
load balancer, and the request id keeps an episode's turns on one server (prefix cache). This class adapts
that call to the driver's `TokenSampler` interface; it does not import verl, only calls the object.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from gym_trainer.samplers.base import PolicyError, SamplingParams, TokenSample

__all__ = ["ServerManager", "ServerManagerSampler", "TokenizerMismatch"]


class TokenizerMismatch(PolicyError):
    """The server generated ids the trainer's tokenizer does not have: the model verl serves and the
    tokenizer verl renders with are not the same model's. Every sample would be wrong, so the agent
    loop raises this instead of scoring the episode."""

    failure = "tokenizer_mismatch"


class ServerManager(Protocol):
    """What the sampler calls: verl's `LLMServerClient.generate` (or a stand-in with its signature)."""

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any: ...


class ServerManagerSampler:
    """Samples one episode's turns through verl's server manager.

    Args:
        server_manager: verl's `LLMServerClient` (the agent loop's `self.server_manager`).
        request_id: one id per episode, so verl routes every turn to the same server.
        vocab_size: the tokenizer's size; ids at or past it raise `TokenizerMismatch`.
        sampling_params: verl's own per-sample params (temperature, top_p, top_k, ...); the driver
            adds `max_tokens` (what is left of the budget) and the end-of-turn `stop_token_ids`.
        model: recorded as the policy's model name with each trajectory.
    """

    token_exact = True

    def __init__(
        self,
        server_manager: ServerManager,
        request_id: str,
        vocab_size: int,
        sampling_params: dict[str, Any],
        model: str = "verl",
    ) -> None:
        self.server_manager = server_manager
        self.request_id = request_id
        self.vocab_size = vocab_size
        self.sampling_params = dict(sampling_params)
        self.model = model
        self.weight_version: str | None = None

    def __repr__(self) -> str:
        return f"ServerManagerSampler({self.model!r}, request_id={self.request_id!r})"

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        request = {
            **self.sampling_params,
            "logprobs": True,  # the driver keeps one logprob per sampled id, whatever verl's default
            "max_tokens": params.max_tokens,
            "stop_token_ids": list(stop_token_ids),
        }
        output = await self.server_manager.generate(
            self.request_id, prompt_ids=list(prompt_ids), sampling_params=request
        )
        ids = [int(i) for i in output.token_ids]
        unknown = [i for i in ids if not 0 <= i < self.vocab_size]
        if unknown:
            raise TokenizerMismatch(
                f"the server generated ids {unknown[:5]} outside the tokenizer's vocabulary of "
                f"{self.vocab_size}: actor_rollout_ref.model's tokenizer is not the served model's"
            )
        logprobs = [float(x) for x in (output.log_probs or [])]
        if len(logprobs) != len(ids) or not all(math.isfinite(x) for x in logprobs):
            raise PolicyError(f"{len(ids)} ids but {len(logprobs)} finite logprobs from the server")
        stopped = bool(ids) and ids[-1] in stop_token_ids
        return TokenSample(ids, logprobs, "stop" if stopped else "length")

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "kind": "verl-server-manager", "weight_version": self.weight_version}

    async def aclose(self) -> None:
        """Nothing to close: verl owns the server manager."""
