"""What the suite's TRL GRPO training tests share: one CPU recipe and a quiet training run.

Each test trains the tiny model on counter tasks for a few dozen steps and asserts that the gym's reward
rises; they differ in how episodes are played (the gym's driver, TRL's `environment_factory`, a user's
agent), not in the trainer's settings, which live here once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["cpu_grpo_config", "rise", "train_quietly"]


def cpu_grpo_config(output_dir: Path, *, steps: int, **overrides: Any) -> Any:
    """A `GRPOConfig` for the tiny model on the CPU: fp32 (what the sampler runs), 16 episodes a step in
    groups of 8, a high learning rate for a 0.1 M-parameter model, no KL term, nothing saved or reported."""
    from trl.trainer.grpo_config import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,  # TRL's default on a CPU too; the sampler runs fp32
        "per_device_train_batch_size": 16,
        "num_generations": 8,
        "max_completion_length": 64,
        "learning_rate": 1e-3,
        "max_steps": steps,
        "logging_steps": 1,
        "temperature": 1.0,
        "beta": 0.0,
        "seed": 0,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
    }
    return GRPOConfig(**(settings | overrides))


def train_quietly(trainer: Any) -> list[dict[str, Any]]:
    """Train without transformers' per-step printing; the log entries of the steps that report a reward."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.train()
    return [entry for entry in trainer.state.log_history if "reward" in entry]


def rise(rewards: list[float], window: int = 5) -> float:
    """The mean reward of the last `window` steps minus that of the first `window`."""
    return sum(rewards[-window:]) / window - sum(rewards[:window]) / window
