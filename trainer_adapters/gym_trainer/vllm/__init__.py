"""A real vLLM as the policy: its server started for a local model (`server`), and the trainer's LoRA
adapter loaded into it in place after every optimizer step (`weights`). See docs/vllm.md.

Nothing here imports vLLM, torch or transformers at import time: vLLM runs in an environment of its own,
as a child process, and torch is imported only by `weights.trainer_logprobs`.
"""

from __future__ import annotations

from gym_trainer.vllm.server import (
    VLLMMissing,
    VLLMOptions,
    VLLMServer,
    VLLMStartError,
    find_vllm_python,
)
from gym_trainer.vllm.weights import LogprobProbe, LoraSync, SyncTiming, WeightSyncError

__all__ = [
    "LogprobProbe",
    "LoraSync",
    "SyncTiming",
    "VLLMMissing",
    "VLLMOptions",
    "VLLMServer",
    "VLLMStartError",
    "WeightSyncError",
    "find_vllm_python",
]
