"""The OpenRLHF adapter: an agent module for `--train.agent_func_path` whose episodes are gym sessions.

`agent_func.py` is the file OpenRLHF loads (its `AgentExecutor` is `executor.GymAgentExecutor`, built on
OpenRLHF's `AgentExecutorBase` and driving OpenRLHF's own `MultiTurnAgentExecutor` loop with
`episode.GymAgentInstance`); `label` writes and reads the prompt dataset's labels (which gym task a row
means); `local_engine.LocalEngine` is a CPU stand-in for OpenRLHF's vLLM actor, for tests and for
debugging an agent module without a GPU. See docs/openrlhf.md.

Importing this package imports nothing heavy; `executor` and `episode` import OpenRLHF and torch.
"""

from __future__ import annotations

from gym_trainer.openrlhf.label import gym_label, gym_prompt_rows, parse_label
from gym_trainer.openrlhf.settings import AgentSettings

__all__ = ["AgentSettings", "gym_label", "gym_prompt_rows", "parse_label"]
