"""Train the agent you already have: run a user's own `async def agent(episode) -> None` as gym episodes.

Each episode gets an OpenAI-compatible gateway URL and an MCP URL of its own (`AgentEpisode`); the gym
records every chat completion through the gateway token-exactly and scores the episode. `play_agent` /
`play_agent_many` run the agent and return `AgentRollout`s (reward, failure, token samples);
`ServedPolicy` serves a model in memory (the trainer's) as the OpenAI-compatible upstream on a CPU.
The trainer glue lives with each trainer: `trl.AgentRolloutFunc`, `art.agent_trajectory_groups`.
See docs/agents-langgraph.md and docs/agents-openai.md.
"""

from __future__ import annotations

from gym_trainer.agents.episode import AgentEpisode, AgentFn
from gym_trainer.agents.policy import ServedPolicy
from gym_trainer.agents.runner import AgentRollout, GatewayConfig, play_agent, play_agent_many
from gym_trainer.agents.samples import EpisodeSamples, TokenSample

__all__ = [
    "AgentEpisode",
    "AgentFn",
    "AgentRollout",
    "EpisodeSamples",
    "GatewayConfig",
    "ServedPolicy",
    "TokenSample",
    "play_agent",
    "play_agent_many",
]
