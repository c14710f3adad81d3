"""A TRL callback that hands the trainer's LoRA adapter to a served vLLM policy after every optimizer step.

`GRPOTrainer(..., rollout_func=GymRolloutFunc(gym, sampler=CompletionsSampler(vllm, model=NAME)),
callbacks=[VLLMWeightSync(LoraSync(vllm, NAME, folder))])`: before the first step the fresh adapter is
loaded as version 0, and after step k as version k, so the rollouts of step k+1 sample through the weights
the optimizer just wrote. `GymRolloutFunc` records `weight_version = trainer.state.global_step` on every
episode it plays, which is the version loaded then: the store says which adapter revision sampled each
episode (`policy.model` is the adapter's name, `policy.weight_version` its revision).

With a `LogprobProbe`, each update is checked: vLLM's logprobs of a fixed prompt and completion against
the trainer's own (`probe.records`). This module imports transformers (the `[trl]` extra); the package's
`__init__` does not import it.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from gym_trainer.vllm.weights import LogprobProbe, LoraSync, SyncTiming

__all__ = ["VLLMWeightSync"]


class VLLMWeightSync(TrainerCallback):
    """Loads the trainer's adapter into vLLM at the start of training and after every optimizer step.

    Args:
        sync: where and under which name the adapter goes.
        probe: checks served against trained logprobs after each update (optional; costs one forward).
    """

    def __init__(self, sync: LoraSync, probe: LogprobProbe | None = None) -> None:
        self.sync = sync
        self.probe = probe

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._push(model, int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._push(model, int(state.global_step))

    def _push(self, model: Any, version: int) -> SyncTiming:
        if model is None:
            raise RuntimeError("the trainer passed no model to its callbacks; the adapter cannot be pushed")
        timing = self.sync.push(model, version)
        if self.probe is not None:
            self.probe.check(model, version)
        return timing
