"""Policy samplers behind one interface: token-exact (`CompletionsSampler`, `LocalSampler`) for
training and evaluation, message-level (`OpenAIChatSampler`) for evaluation only. See `base`.
`BusyTimeSampler` wraps a token sampler to measure how long its policy server was busy."""

from __future__ import annotations

from gym_trainer.samplers.base import (
    ChatSample,
    ChatSampler,
    PolicyError,
    PolicyTimeout,
    SamplingParams,
    TokenSample,
    TokenSampler,
)
from gym_trainer.samplers.chat import OpenAIChatSampler
from gym_trainer.samplers.completions import CompletionsSampler
from gym_trainer.samplers.local import LocalSampler
from gym_trainer.samplers.timing import BusyTimeSampler

__all__ = [
    "BusyTimeSampler",
    "ChatSample",
    "ChatSampler",
    "CompletionsSampler",
    "LocalSampler",
    "OpenAIChatSampler",
    "PolicyError",
    "PolicyTimeout",
    "SamplingParams",
    "TokenSample",
    "TokenSampler",
]
