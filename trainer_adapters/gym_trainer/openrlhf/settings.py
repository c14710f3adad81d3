"""The agent module's settings, read from the environment.

OpenRLHF builds the executor itself (`AgentExecutor()`, no arguments) inside each vLLM Ray actor, so the
only channel to it is the process environment (set it before `ray start`, or in the job's
`runtime_env.env_vars`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gym_trainer.chat import HERMES_TEMPLATE

__all__ = ["AgentSettings"]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Where the gym is and how its episodes are played.

    Args:
        gym_url: the gym (`GYM_URL`); several replicas comma-separated.
        api_key: the gym's key (`GYM_API_KEY`), when it requires keys.
        run: the gym `run` trajectories are filed under (`GYM_RUN`).
        max_turns: assistant turns per episode (`GYM_OPENRLHF_MAX_TURNS`); the gym may end it sooner.
        chat_template: `hermes` (the gym's Hermes/ChatML template), a Jinja file, or empty for the
            tokenizer's own (`GYM_OPENRLHF_CHAT_TEMPLATE`).
        ttl_s: idle TTL of each session (`GYM_OPENRLHF_TTL_S`), the gym's default when unset.
    """

    gym_url: str = "http://127.0.0.1:8000"
    api_key: str | None = None
    run: str | None = None
    max_turns: int = 8
    chat_template: str | None = None
    ttl_s: float | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AgentSettings:
        env = os.environ if environ is None else environ
        ttl, turns = env.get("GYM_OPENRLHF_TTL_S"), env.get("GYM_OPENRLHF_MAX_TURNS")
        return cls(
            gym_url=env.get("GYM_URL") or "http://127.0.0.1:8000",
            api_key=env.get("GYM_API_KEY") or None,
            run=env.get("GYM_RUN") or None,
            max_turns=int(turns) if turns else 8,
            chat_template=env.get("GYM_OPENRLHF_CHAT_TEMPLATE") or None,
            ttl_s=float(ttl) if ttl else None,
        )

    @property
    def gym_urls(self) -> list[str]:
        return [url.strip() for url in self.gym_url.split(",") if url.strip()]

    def template(self) -> str | None:
        """The chat template text to render with, or None for the tokenizer's own."""
        if not self.chat_template:
            return None
        if self.chat_template == "hermes":
            return HERMES_TEMPLATE
        return Path(self.chat_template).read_text()
