"""The trainer side's reading of `GET /v1/rollouts/{id}/samples`: an episode's token-exact samples.

The gym records every chat completion an agent makes through its episode gateway and splits the calls
into samples (docs/gateway.md): one sample while each call's prompt extends the previous prompt and
completion, a new one where a chat template rewrote history. Validated here with pydantic, because it is
the boundary where a trainer starts trusting token ids; unknown fields are ignored so a newer gym can add
some.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["EpisodeSamples", "TokenSample"]


class TokenSample(BaseModel):
    """One training sequence: the prompt, then completion-side tokens with a loss mask (1: sampled by the
    policy, with its logprob; 0: tool results and template glue in between, logprob 0.0)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    mask: list[int]
    calls: list[int] = Field(default_factory=list, description="the recorded calls this sample holds")

    @model_validator(mode="after")
    def _aligned(self) -> TokenSample:
        if not len(self.completion_ids) == len(self.logprobs) == len(self.mask):
            raise ValueError(
                f"completion_ids, logprobs and mask differ in length "
                f"({len(self.completion_ids)}, {len(self.logprobs)}, {len(self.mask)})"
            )
        return self

    @property
    def model_tokens(self) -> int:
        """How many tokens the policy sampled (mask 1)."""
        return sum(self.mask)


class EpisodeSamples(BaseModel):
    """An episode's samples and what they cover; the episode's reward applies to every sample."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    token_exact: bool
    samples: list[TokenSample]
    masked_share: float = 0.0
    num_calls: int = 0
