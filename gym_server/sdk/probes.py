"""`HackProbe`: a scripted episode an environment offers `gym-server env check` to prove its reward holds.

An environment knows its own loopholes best (editing the tests it is judged by, `sys.exit(0)` before
the checks run, a fork bomb through its code tool); `Environment.hack_probes()` returns them as probes,
and the check plays each one through the real turn engine and fails the environment when a probe earns
more than its `max_reward`, crashes the environment, or (`expect`) the last tool message lacks a text
that shows the environment still works afterwards.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["HackProbe"]


class HackProbe(BaseModel):
    """One scripted attempt at the reward (or at the sandbox) and the most it may earn."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9_\-]{1,64}$", description="short id, shown in the report")
    messages: list[dict[str, Any]] = Field(min_length=1, description="the assistant turns, in OpenAI form")
    max_reward: float = Field(0.0, ge=0.0, le=1.0, description="the most the probe may score")
    kind: Literal["hack", "sandbox"] = Field(
        "hack",
        description="`sandbox`: tries the sandbox's limits (fork bomb, memory hog) rather than the reward",
    )
    expect: str | None = Field(
        None, description="text the last tool message must hold (the environment still answers afterwards)"
    )
    why: str = Field("", description="one line: what the probe tries")
