"""What a live session is: the open episode the manager holds, and what one step answers.

Apart from the manager so the facades, the gateway and the routes that read a session (its identity,
tools, budgets, turns) depend on its shape, not on the manager's lifecycle code.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gym_server.sdk.environment import Environment, VerifyResult
from gym_server.sdk.registry import EnvironmentEntry
from gym_server.store.records import DEFAULT_TENANT, utcnow

__all__ = ["LiveSession", "StepResult"]


@dataclass(slots=True)
class StepResult:
    messages: list[dict[str, Any]]
    done: bool
    reward: float | None
    info: dict[str, Any]


@dataclass(eq=False, slots=True, weakref_slot=True)
class LiveSession:
    """One open episode and its bookkeeping; weakly referable, so what other parts keep per episode (an
    episode gateway's state) goes with it when the manager lets it go."""

    id: str
    entry: EnvironmentEntry
    env: Environment
    ttl_s: float
    run: str | None
    policy: dict[str, Any] | None
    metadata: dict[str, Any]
    created_at: datetime
    tools: list[dict[str, Any]]
    max_turns: int
    tenant: str = DEFAULT_TENANT
    parent_id: str | None = None  # a fork's lineage: the episode and turn it was forked at
    parent_turn: int | None = None
    last_active: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    transcript_bytes: int = 0
    step_ms: list[float] = field(default_factory=list)
    turn_data: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    verified: VerifyResult | None = None
    verified_at_len: int = -1
    dirty: bool = False
    truncated: bool = False

    def expires_at(self) -> datetime:
        idle = time.monotonic() - self.last_active
        return utcnow() + timedelta(seconds=max(0.0, self.ttl_s - idle))

    def is_idle_expired(self, now: float) -> bool:
        return now - self.last_active > self.ttl_s

    def identity(self) -> dict[str, Any]:
        """The episode's ids and bounds as the protocol facades announce them when it opens (MCP's
        initialize `_meta`, OpenEnv's reset `metadata`, NeMo Gym's `seed_session` answer)."""
        return {
            "session_id": self.id,
            "env": self.entry.name,
            "env_version": self.entry.version,
            "task_id": self.env.task.id,
            "seed": self.env.seed,
            "max_turns": self.max_turns,
            "expires_at": self.expires_at().isoformat(),
        }
