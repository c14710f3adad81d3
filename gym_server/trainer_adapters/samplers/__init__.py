"""Policy samplers behind one interface: token-exact (`CompletionsSampler`, `LocalSampler`) for
training and evaluation, message-level (`OpenAIChatSampler`) for evaluation only. See `base`."""

from __future__ import annotations

from gym_server.trainer_adapters.samplers.base import (
    ChatSample,
    ChatSampler,
    PolicyError,
    PolicyTimeout,
    SamplingParams,
    TokenSample,
    TokenSampler,
)
from gym_server.trainer_adapters.samplers.chat import OpenAIChatSampler
from gym_server.trainer_adapters.samplers.completions import CompletionsSampler
from gym_server.trainer_adapters.samplers.local import LocalSampler

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
