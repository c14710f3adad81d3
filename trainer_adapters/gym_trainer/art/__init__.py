"""The ART adapter (OpenPipe's Agent Reinforcement Trainer, `openpipe-art`, Python >= 3.12): gym episodes
as ART rollouts. `gym_rollout(model, gym, spec)` returns an `art.Trajectory`; `gym_trajectory_groups`
gathers `art.TrajectoryGroup`s with ART's `gather_trajectory_groups`; failed episodes raise
`GymEpisodeFailed`, which ART keeps in `group.exceptions` ("no signal", never a reward of 0). RULER
(`art.rewards.ruler_score_group`) works on these groups unchanged. `agent_trajectory_groups` does the same
for a user's own agent played through each episode's gateway (`agent_groups`). See docs/art.md.
"""

from __future__ import annotations

from gym_trainer.art.agent_groups import agent_trajectory, agent_trajectory_groups
from gym_trainer.art.rollout import (
    GymEpisodeFailed,
    GymRolloutConfig,
    gym_rollout,
    gym_trajectory_groups,
)

__all__ = [
    "GymEpisodeFailed",
    "GymRolloutConfig",
    "agent_trajectory",
    "agent_trajectory_groups",
    "gym_rollout",
    "gym_trajectory_groups",
]
