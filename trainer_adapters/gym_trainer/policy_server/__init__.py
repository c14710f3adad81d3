"""`gym-server policy serve`: an OpenAI-compatible, token-in policy server on the CPU (see `app`)."""

from __future__ import annotations

from gym_trainer.policy_server.app import PolicyServerError, create_policy_app

__all__ = ["PolicyServerError", "create_policy_app"]
