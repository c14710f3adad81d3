"""The trajectory record: what every episode leaves behind, as the session manager hands it to the store.

This pydantic model is the boundary between the live side (sessions, rollouts) and the durable side (the
SQLAlchemy rows in `store.models`). It carries the fields of the design brief: identity and lineage
(run, env and its version, task, seed), the full transcript, the score with its components and the
verifier version, why it ended (status and failure class), the policy that produced it, per-turn token
data when a driver sent it, and timings.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BUFFER_GROUP_KEY",
    "DEFAULT_TENANT",
    "EVALUATION",
    "FAILURE_DETAIL_KEY",
    "INLINE_TASK_KEY",
    "NAME_MAX_CHARS",
    "NAME_PATTERN",
    "PURPOSE_KEY",
    "FailureClass",
    "TrajectoryRecord",
    "TrajectoryStatus",
    "utcnow",
]

# The tenant of episodes made without an API key (authentication off) and of rows older than tenants.
DEFAULT_TENANT = "default"
# The longest name a row keeps (run, env, task id, the policy's model: `VARCHAR(255)` columns; PostgreSQL
# refuses a longer one, so the API refuses it first).
NAME_MAX_CHARS = 255
# What a name may hold: no control character (PostgreSQL's `text` refuses NUL), as a pydantic `pattern`
# for the request fields that become a name column or a filter of the store (`storable.name_problem`).
NAME_PATTERN = r"^[^\x00-\x1f\x7f]*$"

# The metadata key under which an episode played on an inline task (one not in its environment's dataset,
# or differing from the dataset's task of that id) keeps that task, answer included: `reverify` and
# `audit` score the episode again on the very task it was played on. Set by the server; a client's own
# value under this key is replaced.
INLINE_TASK_KEY = "inline_task"
# The `metadata` key of a failure's cause in words, beside its class (`failure`): the gateway's "the
# upstream http://127.0.0.1:8001 is unreachable: ConnectError, connection refused". Set by the server.
FAILURE_DETAIL_KEY = "failure_detail"
# The `metadata` key saying what an episode was played for; `EVALUATION` marks held-out evaluations
# (the demos', `gym-server eval`), which `gym-server export` leaves out of training data unless asked.
PURPOSE_KEY = "purpose"
EVALUATION = "evaluation"
# The `metadata` key of the rollout-buffer group an episode was played for (`store.buffer`); the producer
# that was admitted to play the group puts it on each of the group's sessions.
BUFFER_GROUP_KEY = "buffer_group"


def utcnow() -> datetime:
    return datetime.now(UTC)


class TrajectoryStatus(StrEnum):
    """Where an episode's life ended (or that it has not yet)."""

    LIVE = "live"  # session open; written at creation so a crash can never drop it silently
    COMPLETED = "completed"  # the episode reached done, then was closed
    ABANDONED = "abandoned"  # the client closed it before done
    EXPIRED = "expired"  # idle past its TTL, closed by the reaper
    FAILED = "failed"  # ended by a budget or an error; see the failure class
    LOST = "lost"  # the server stopped or restarted while the session was live


class FailureClass(StrEnum):
    """Why an episode or its score cannot be trusted as training signal."""

    MAX_TURNS = "max_turns"
    MAX_TRANSCRIPT_BYTES = "max_transcript_bytes"
    ENV_ERROR = "env_error"
    VERIFY_ERROR = "verify_error"
    VERIFY_TIMEOUT = "verify_timeout"
    EXPIRED = "expired"
    SERVER_SHUTDOWN = "server_shutdown"
    SERVER_RESTART = "server_restart"
    SANDBOX_TIMEOUT = "sandbox_timeout"
    SANDBOX_OOM = "sandbox_oom"
    SANDBOX_ERROR = "sandbox_error"
    JUDGE_FAILED = "judge_failed"
    POLICY_ERROR = "policy_error"
    POLICY_TIMEOUT = "policy_timeout"
    STORE_ERROR = (
        "store_error"  # the store did not commit the episode's row at creation (the create was a 503)
    )


class TrajectoryRecord(BaseModel):
    """One episode, live or finished. `id` is the session id (or the rollout id for server-run episodes)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    run: str | None = None
    env: str
    env_version: str
    task_id: str
    seed: int | None = None
    status: TrajectoryStatus = TrajectoryStatus.LIVE
    failure: str | None = None
    done_reason: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    reward: float | None = None
    components: dict[str, float] = Field(default_factory=dict)
    verify_info: dict[str, Any] = Field(default_factory=dict)
    verifier_version: str | None = None
    policy: dict[str, Any] | None = Field(None, description="model, weight version, sampling parameters")
    turns: list[dict[str, Any]] = Field(
        default_factory=list,
        description="per-turn token ids, logprobs and loss masks sent by a driver; a turn cut at the "
        "token budget is the last entry, with `truncated: true` and its text in `content`",
    )
    timings: dict[str, Any] = Field(default_factory=dict, description="step durations in ms and totals")
    metadata: dict[str, Any] = Field(default_factory=dict)
    num_turns: int = 0
    version_min: int | None = Field(
        None, description="the oldest policy version that sampled a call of the episode (store/versions.py)"
    )
    version_max: int | None = Field(None, description="the newest policy version that sampled a call of it")
    buffer_group: str | None = Field(
        None, description="the rollout-buffer group it was played for: its `metadata.buffer_group`"
    )
    server_name: str | None = None
    tenant: str = Field(DEFAULT_TENANT, description="the tenant of the API key that created it")
    parent_id: str | None = Field(None, description="the episode this one was forked from (docs/fork.md)")
    parent_turn: int | None = Field(
        None, description="the parent's turn it was forked at: the first `parent_turn` turns are the parent's"
    )
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
