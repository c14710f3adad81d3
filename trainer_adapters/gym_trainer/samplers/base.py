"""The sampler interface: what the rollout driver asks of a policy, whatever serves it.

Two kinds, because they promise different things:

- `TokenSampler` (token in, token out): the prompt goes as token ids, the sampled ids and one logprob
  per id come back verbatim. Only these may feed training: the trainer recomputes logprobs on exactly
  these ids. Implementations: `CompletionsSampler` (vLLM or `gym-server policy serve` over HTTP) and
  `LocalSampler` (a transformers model in this process).
- `ChatSampler` (messages in, a message out): any OpenAI-compatible chat API. The provider tokenizes
  and parses, so nothing is token-exact; the driver accepts it for evaluation and refuses it for
  training (`token_exact = False`).

Both raise `PolicyError` (the policy failed or answered garbage) or its subclass `PolicyTimeout`, which
the driver turns into the `policy_error` / `policy_timeout` failure classes of the episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "ChatSample",
    "ChatSampler",
    "PolicyError",
    "PolicyTimeout",
    "SamplingParams",
    "TokenSample",
    "TokenSampler",
]

FinishReason = Literal["stop", "length"]


class PolicyError(Exception):
    """The policy could not produce a usable sample (HTTP error, malformed answer, crash)."""

    failure = "policy_error"


class PolicyTimeout(PolicyError):
    """The policy did not answer within its timeout."""

    failure = "policy_timeout"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling settings, recorded with each trajectory's policy metadata.

    `max_tokens` caps one assistant turn; the driver lowers it to what is left of the episode's
    completion budget.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature must be >= 0 and top_p in (0, 1]")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class TokenSample:
    """Sampled ids exactly as generated, one processed logprob each, and why sampling stopped."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise PolicyError(f"{len(self.token_ids)} token ids but {len(self.logprobs)} logprobs")


@dataclass(frozen=True, slots=True)
class ChatSample:
    """An assistant message from a chat API (already parsed by the provider)."""

    message: dict[str, Any]
    finish_reason: str
    completion_tokens: int = 0


@runtime_checkable
class TokenSampler(Protocol):
    """Token-exact sampling: safe to train on."""

    token_exact: bool
    weight_version: str | None

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample: ...

    def describe(self) -> dict[str, Any]:
        """Model, weight version and kind, stored with every trajectory as its `policy`."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ChatSampler(Protocol):
    """Message-level sampling from an OpenAI-compatible chat API: evaluation only."""

    token_exact: bool
    weight_version: str | None

    async def chat(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], params: SamplingParams
    ) -> ChatSample: ...

    def describe(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...
