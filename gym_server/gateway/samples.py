"""Token-exact training samples from an episode's recorded gateway calls: the splitting rule.

A trainer learns from token sequences the policy actually saw and produced. When every call's prompt
is the previous call's prompt and completion followed by new tokens (tool results, a user turn, the
chat template's glue), the whole episode is one sequence: the model's tokens get mask 1 and their
logprobs, everything in between mask 0. A chat template that rewrites history (Qwen3-style dropping of
earlier reasoning, truncation, a system prompt that changes) breaks that prefix, and the sequence the
next call saw is not the one recorded so far: a new sample starts there. Pure functions, no I/O.

Policy versions do not split a sample. A call records the version that sampled it (`weight_version`),
and a sample whose calls came from more than one version (the weights changed mid-episode: a partial
rollout) says so in `weight_versions` and `spans_versions`. Its per-token `logprobs` are each the
behaviour policy's own, so an importance-sampling correction per token (TRL's
`vllm_importance_sampling_correction` divides the trainer's probability by exactly these) stays right
across the change; splitting would only cut the context the later calls were sampled in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, computed_field

from gym_server.store.versions import VERSION_KEY, as_version

__all__ = [
    "CallTokens",
    "Sample",
    "SampleTally",
    "SamplesReport",
    "call_tokens",
    "extension",
    "samples_report",
    "split_samples",
]


@dataclass(frozen=True, slots=True)
class CallTokens:
    """One complete, token-exact gateway call: what the policy saw and what it sampled."""

    index: int
    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    logprobs: Sequence[float]
    weight_version: int | None = None  # the policy version that sampled it, when recorded


class Sample(BaseModel):
    """One training sequence: `prompt_ids`, then `completion_ids` with a `mask` (1: sampled by the
    policy, with its logprob; 0: tokens in between, logprob 0.0), made of the calls in `calls`."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    mask: list[int]
    calls: list[int] = Field(description="the indexes of the recorded calls this sample holds")
    weight_versions: list[int] = Field(
        default_factory=list, description="the policy versions that sampled its calls, oldest first"
    )

    @computed_field(description="sampled by more than one policy version (a partial rollout)")  # type: ignore[prop-decorator]
    @property
    def spans_versions(self) -> bool:
        return len(self.weight_versions) > 1


class SamplesReport(BaseModel):
    """`GET /v1/rollouts/{id}/samples`: the episode's samples and what they cover."""

    token_exact: bool = Field(description="every recorded call came with token ids")
    samples: list[Sample]
    masked_share: float = Field(description="share of the completion-side tokens with mask 0")
    num_calls: int = Field(description="calls recorded on the episode (those without token ids included)")
    reward: float | None = Field(None, description="the episode's reward; it applies to every sample")


def extension(sequence: Sequence[int], prompt: Sequence[int]) -> list[int] | None:
    """The rule itself: the tokens `prompt` adds to `sequence` (the current sample's prompt and
    completion) when it starts with all of it, else None (a new sample starts)."""
    if not sequence or list(prompt[: len(sequence)]) != list(sequence):
        return None
    return list(prompt[len(sequence) :])


def split_samples(calls: Iterable[CallTokens]) -> list[Sample]:
    """The calls, in order, as samples: a call whose prompt starts with the current sample's prompt and
    completion extends it; any other call starts a new sample."""
    samples: list[Sample] = []
    for call in calls:
        current = samples[-1] if samples else None
        gap = extension(current.prompt_ids + current.completion_ids, call.prompt_ids) if current else None
        if current is not None and gap is not None:
            current.completion_ids += gap + list(call.completion_ids)
            current.logprobs += [0.0] * len(gap) + [float(lp) for lp in call.logprobs]
            current.mask += [0] * len(gap) + [1] * len(call.completion_ids)
            current.calls.append(call.index)
            if call.weight_version is not None and call.weight_version not in current.weight_versions:
                current.weight_versions = sorted([*current.weight_versions, call.weight_version])
            continue
        samples.append(
            Sample(
                prompt_ids=list(call.prompt_ids),
                completion_ids=list(call.completion_ids),
                logprobs=[float(lp) for lp in call.logprobs],
                mask=[1] * len(call.completion_ids),
                calls=[call.index],
                weight_versions=[] if call.weight_version is None else [call.weight_version],
            )
        )
    return samples


def call_tokens(record: dict[str, Any]) -> CallTokens | None:
    """The tokens of one stored call record (see `gym_server.gateway.record`), or None when the call
    carries no token ids (an evaluation-only upstream)."""
    prompt, completion, logprobs = (
        record.get("prompt_ids"),
        record.get("completion_ids"),
        record.get("logprobs"),
    )
    if not isinstance(prompt, list) or not isinstance(completion, list):
        return None
    if not isinstance(logprobs, list) or len(logprobs) != len(completion):
        logprobs = [0.0] * len(completion)
    return CallTokens(int(record["call"]), prompt, completion, logprobs, as_version(record.get(VERSION_KEY)))


def samples_report(calls: Sequence[dict[str, Any]], reward: float | None = None) -> SamplesReport:
    """The report over an episode's stored call records (in call order)."""
    tokens = [call_tokens(record) for record in calls]
    samples = split_samples(token for token in tokens if token is not None)
    total = sum(len(sample.mask) for sample in samples)
    masked = sum(sample.mask.count(0) for sample in samples)
    return SamplesReport(
        token_exact=all(token is not None for token in tokens),
        samples=samples,
        masked_share=round(masked / total, 6) if total else 0.0,
        num_calls=len(calls),
        reward=reward,
    )


@dataclass(slots=True)
class SampleTally:
    """The report's counts, kept call by call as a gateway records them (the trajectory's
    `metadata.samples`), holding only the current sample's token sequence."""

    sequence: list[int] = field(default_factory=list)
    num_samples: int = 0
    masked: int = 0
    completion: int = 0
    num_calls: int = 0
    token_exact: bool = True

    def add(self, prompt_ids: Sequence[int] | None, completion_ids: Sequence[int] | None) -> None:
        self.num_calls += 1
        if prompt_ids is None or completion_ids is None:
            self.token_exact = False
            return
        gap = extension(self.sequence, prompt_ids)
        if gap is None:
            self.num_samples += 1
            self.sequence = [*prompt_ids, *completion_ids]
        else:
            self.masked += len(gap)
            self.completion += len(gap)
            self.sequence += [*gap, *completion_ids]
        self.completion += len(completion_ids)

    def summary(self) -> dict[str, Any]:
        share = round(self.masked / self.completion, 6) if self.completion else 0.0
        return {
            "token_exact": self.token_exact,
            "num_samples": self.num_samples,
            "masked_share": share,
            "num_calls": self.num_calls,
        }
