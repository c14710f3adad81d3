"""The TRL adapter: `rollout_func` for `GRPOTrainer` (the gym's driver, or a user's own agent), a reward
that reads the gym's verdict, and an `environment_factory` whose tool methods are bound from the gym's
schemas. See `docs/trl.md` and `docs/agents-openai.md`.

Nothing here imports trl or torch at import time; they are needed only when a trainer runs.
"""

from __future__ import annotations

from gym_server.trainer_adapters.trl.agent_rollout import AgentRolloutFunc
from gym_server.trainer_adapters.trl.curriculum import load_curriculum_dataset
from gym_server.trainer_adapters.trl.environment import (
    GymToolEnvironment,
    make_environment_factory,
    use_hermes_response_template,
)
from gym_server.trainer_adapters.trl.reward import gym_component_reward, gym_reward
from gym_server.trainer_adapters.trl.rollout import GymRolloutFunc, gym_prompt, load_gym_dataset

__all__ = [
    "AgentRolloutFunc",
    "GymRolloutFunc",
    "GymToolEnvironment",
    "gym_component_reward",
    "gym_prompt",
    "gym_reward",
    "load_curriculum_dataset",
    "load_gym_dataset",
    "make_environment_factory",
    "use_hermes_response_template",
]
