"""The GRPO recipe the demos, the benchmarks and the interop peers share: one `GRPOConfig` and one LoRA
adapter, so `gym-server demo`, `benchmarks/gpu_step.py` and a trainer node running alone time and train
the same thing. torch, trl and peft are imported when called (the `[trl]` extra).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from gym_trainer.devices import Placement

__all__ = ["grpo_args", "lora_config"]


def lora_config() -> Any:
    """The demo's LoRA adapter for SmolLM2 (rank 16 on every linear layer)."""
    from peft import LoraConfig

    return LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def grpo_args(
    output_dir: Path,
    placement: Placement,
    *,
    reward_weights: list[float],
    generations: int,
    prompts_per_step: int,
    max_completion: int,
    lr: float,
    steps: int,
    seed: int,
) -> Any:
    """The demo's `GRPOConfig` (one place, so `benchmarks/gpu_step.py` times the same recipe): on-policy
    (beta 0, temperature 1), the trainer on the placement's device, bf16 autocast when its dtype is bf16."""
    trl: Any = importlib.import_module("trl")
    return trl.GRPOConfig(
        reward_weights=reward_weights,
        output_dir=str(output_dir),
        use_cpu=not placement.is_cuda,
        # TRL 1.16 defaults to bf16 autocast even on a CPU: on CPUs without bf16 units its matmuls are
        # slower than fp32, and training would score tokens in another precision than sampling did.
        # So autocast follows the placement's dtype: the weights the sampler uses are in it already.
        bf16=placement.bf16,
        per_device_train_batch_size=generations * prompts_per_step,
        num_generations=generations,
        max_completion_length=max_completion,
        learning_rate=lr,
        max_steps=steps,
        logging_steps=max(1, steps // 20),  # TRL prints a line per log: about 20 a run, under the bar
        temperature=1.0,
        beta=0.0,
        seed=seed,
        report_to="none",
        save_strategy="no",
        disable_tqdm=False,
    )
