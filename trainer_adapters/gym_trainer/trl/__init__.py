"""The TRL adapter: `rollout_func` for `GRPOTrainer` (the gym's driver, or a user's own agent), a reward
that reads the gym's verdict, and an `environment_factory` whose tool methods are bound from the gym's
schemas. See `docs/trl.md` and `docs/agents-openai.md`.

Nothing here imports trl or torch at import time; they are needed only when a trainer runs.
"""

from __future__ import annotations

from gym_trainer.trl.agent_rollout import AgentRolloutFunc
from gym_trainer.trl.curriculum import load_curriculum_dataset
from gym_trainer.trl.environment import (
    GymToolEnvironment,
    make_environment_factory,
    use_hermes_response_template,
)
from gym_trainer.trl.recipe import grpo_args, lora_config
from gym_trainer.trl.reward import gym_component_reward, gym_reward
from gym_trainer.trl.rollout import GymRolloutFunc, gym_prompt, load_gym_dataset

__all__ = [
    "AgentRolloutFunc",
    "GymRolloutFunc",
    "GymToolEnvironment",
    "grpo_args",
    "gym_component_reward",
    "gym_prompt",
    "gym_reward",
    "load_curriculum_dataset",
    "load_gym_dataset",
    "lora_config",
    "make_environment_factory",
    "use_hermes_response_template",
]
