"""Policy samplers behind one interface: token-exact (`CompletionsSampler`, `LocalSampler`) for
training and evaluation, message-level (`OpenAIChatSampler`) for evaluation only. See `base`."""

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

__all__ = [
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
