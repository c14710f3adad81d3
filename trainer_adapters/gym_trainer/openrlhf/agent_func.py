"""The file to give OpenRLHF's `--train.agent_func_path`: it loads this file by path and builds its
`AgentExecutor` with no arguments (settings from the environment: `GYM_URL`, see `settings`).

    AGENT=$(python -c 'import gym_trainer.openrlhf.agent_func as m; print(m.__file__)')
    python -m openrlhf.cli.train_ppo_ray ... --train.agent_func_path "$AGENT"
"""

from gym_trainer.openrlhf.executor import GymAgentExecutor as AgentExecutor

__all__ = ["AgentExecutor"]
