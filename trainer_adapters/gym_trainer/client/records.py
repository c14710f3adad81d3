"""The gym's answers as typed records, read leniently: optional fields may be missing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EnvironmentInfo", "ForkInfo", "SessionInfo", "StepResult", "VerifyResult"]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A started episode: its id, the opening messages and the tools the model may call."""

    session_id: str
    env: str
    env_version: str
    task_id: str
    seed: int | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_turns: int
    expires_at: str
    base_url: str
    parent_id: str | None = None  # a fork's: the episode and turn it was forked at (docs/fork.md)
    parent_turn: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any], base_url: str) -> SessionInfo:
        return cls(
            session_id=data["session_id"],
            env=data["env"],
            env_version=data["env_version"],
            task_id=data["task_id"],
            seed=data.get("seed"),
            messages=list(data["messages"]),
            tools=list(data.get("tools") or []),
            max_turns=int(data["max_turns"]),
            expires_at=str(data.get("expires_at", "")),
            base_url=base_url,
            parent_id=data.get("parent_id"),
            parent_turn=data.get("parent_turn"),
        )


@dataclass(frozen=True, slots=True)
class ForkInfo:
    """The forks one fork request opened, and how the gym rebuilt their state (`copy` or `replay`: a
    replay steps the environment through the prefix again on the server, no tokens generated)."""

    parent_id: str
    turn: int
    fork_mode: str
    forks: list[SessionInfo]

    @classmethod
    def from_json(cls, data: dict[str, Any], base_url: str) -> ForkInfo:
        return cls(
            parent_id=str(data["parent_id"]),
            turn=int(data["turn"]),
            fork_mode=str(data["fork_mode"]),
            forks=[SessionInfo.from_json(item, base_url) for item in data["forks"]],
        )


@dataclass(frozen=True, slots=True)
class StepResult:
    """The environment's replies to one assistant message; `reward` is set when the step ended it."""

    messages: list[dict[str, Any]]
    done: bool
    reward: float | None
    info: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepResult:
        return cls(
            messages=list(data.get("messages") or []),
            done=bool(data["done"]),
            reward=data.get("reward"),
            info=dict(data.get("info") or {}),
        )


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """A score: `failure` set means "no signal" (verifier timeout, judge down), not a zero."""

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VerifyResult:
        return cls(
            reward=float(data["reward"]),
            components={k: float(v) for k, v in (data.get("components") or {}).items()},
            info=dict(data.get("info") or {}),
            failure=data.get("failure"),
        )


@dataclass(frozen=True, slots=True)
class EnvironmentInfo:
    name: str
    version: str
    verifier_version: str
    description: str
    kind: str
    max_turns: int | None
    tools: list[dict[str, Any]]
    datasets: list[dict[str, Any]]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EnvironmentInfo:
        return cls(
            name=data["name"],
            version=data["version"],
            verifier_version=data.get("verifier_version", ""),
            description=data.get("description", ""),
            kind=data.get("kind", ""),
            max_turns=data.get("max_turns"),
            tools=list(data.get("tools") or []),
            datasets=list(data.get("datasets") or []),
        )
