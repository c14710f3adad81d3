"""Pure translations between the gym's session vocabulary and OpenEnv's wire format (openenv-core 0.3.0).

Nothing here does I/O: these functions take and return plain dicts, so the rules of the facade (which
action becomes which assistant message, what an observation holds, what a gym error becomes on the
OpenEnv wire) are tested without a server. The shapes are OpenEnv's own:
- a reset/step answer is `{"observation": {...}, "reward": float | None, "done": bool}` (its
  `serialize_observation`), sent over the WebSocket as `{"type": "observation", "data": <that>}`;
- an action is OpenEnv's MCP action (`{"type": "call_tool", "tool_name", "arguments"}` or
  `{"type": "list_tools"}`, what its `MCPToolClient` sends), or `{"type": "message", "message": ...}`,
  the native step's assistant message, for environments that end on text or take several calls a turn;
- an error is `{"type": "error", "data": {"message", "code", ...}}` with one of OpenEnv's `WSErrorCode`s.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gym_server.core.errors import AtCapacity, GymError
from gym_server.protocols.mcp.mapping import is_tool_error, mcp_tool, problem_data, tool_reply
from gym_server.sdk.messages import Message
from gym_server.sdk.registry import EnvironmentEntry
from gym_server.sessions.live import LiveSession, StepResult

__all__ = [
    "EPISODE_META_KEY",
    "Action",
    "ActionError",
    "CallTool",
    "ListTools",
    "ResetParams",
    "SendMessage",
    "catalog_tools_result",
    "error_data",
    "fresh_state",
    "gym_error_data",
    "list_tools_result",
    "parse_action",
    "parse_reset",
    "reset_result",
    "state",
    "step_result",
    "tools",
    "validation_errors",
]

# The observation `metadata` key under which the gym's episode state travels (OpenEnv's `Observation`
# has a free `metadata` dict; its MCP client reads it back).
EPISODE_META_KEY: Final = "gym-server/episode"

# OpenEnv's `WSErrorCode` values (openenv.core.env_server.types), spelled out: the service imports no peer.
INVALID_JSON: Final = "INVALID_JSON"
UNKNOWN_TYPE: Final = "UNKNOWN_TYPE"
VALIDATION_ERROR: Final = "VALIDATION_ERROR"
EXECUTION_ERROR: Final = "EXECUTION_ERROR"
CAPACITY_REACHED: Final = "CAPACITY_REACHED"
FACTORY_ERROR: Final = "FACTORY_ERROR"
SESSION_ERROR: Final = "SESSION_ERROR"


class ResetParams(BaseModel):
    """What a reset may choose, mirroring `POST /v1/sessions` (all optional).

    `seed` and `episode_id` are OpenEnv's own `ResetRequest` fields; `episode_id` is the client's name
    for the episode, kept in the trajectory's metadata (the gym's session id is its own). `task_id`,
    `split` and `run` are the gym's: a task by id, or drawn from `split` by `seed`.
    """

    model_config = ConfigDict(extra="forbid")

    seed: int | None = Field(None, ge=0, lt=2**63)
    episode_id: str | None = Field(None, max_length=255)
    task_id: str | None = Field(None, max_length=256)
    split: str | None = Field(None, max_length=128)
    run: str | None = Field(None, max_length=256)


class CallTool(BaseModel):
    """OpenEnv's `CallToolAction`: one tool call, one gym step."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["call_tool"]
    tool_name: str = Field(max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ListTools(BaseModel):
    """OpenEnv's `ListToolsAction`: the episode's tools; not a step."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["list_tools"]
    metadata: dict[str, Any] = Field(default_factory=dict)


class SendMessage(BaseModel):
    """A whole assistant message (text and/or several tool calls), exactly as the native step takes it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["message"]
    message: Message
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("message")
    @classmethod
    def _assistant_only(cls, message: Message) -> Message:
        if message.role != "assistant":  # as the native step refuses it (422)
            raise ValueError(f"a step takes the assistant's message, got role {message.role!r}")
        return message


Action = Annotated[CallTool | ListTools | SendMessage, Field(discriminator="type")]


class _ActionModel(BaseModel):
    action: Action


class ActionError(ValueError):
    """An action or reset that does not parse; carries OpenEnv's error code and pydantic's error list."""

    def __init__(self, message: str, code: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.errors = message, code, errors or []


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """Pydantic's errors as JSON-safe dicts (FastAPI's 422 `detail` list, which OpenEnv also sends)."""
    return [
        {"type": error["type"], "loc": list(error["loc"]), "msg": error["msg"]}
        for error in exc.errors(include_url=False, include_input=False)
    ]


def parse_reset(data: Any) -> ResetParams:
    """The reset's parameters from a WebSocket reset's `data` or an HTTP reset's body.

    Raises:
        ActionError: not an object, an unknown field or a value of the wrong type (VALIDATION_ERROR).
    """
    if data is None:
        return ResetParams()
    try:
        return ResetParams.model_validate(data)
    except ValidationError as exc:
        raise ActionError(
            "invalid reset parameters (accepted: seed, episode_id, task_id, split, run)",
            VALIDATION_ERROR,
            validation_errors(exc),
        ) from None


def parse_action(data: Any) -> CallTool | ListTools | SendMessage:
    """An action from a WebSocket step's `data` or an HTTP step's `action`.

    Raises:
        ActionError: anything but one of the three action shapes (VALIDATION_ERROR, with the errors).
    """
    try:
        return _ActionModel.model_validate({"action": data}).action
    except ValidationError as exc:
        raise ActionError(
            "invalid action: expected {'type': 'call_tool', 'tool_name', 'arguments'}, "
            "{'type': 'list_tools'} or {'type': 'message', 'message': <assistant message>}",
            VALIDATION_ERROR,
            validation_errors(exc),
        ) from None


def tools(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function schemas (an episode's, or an environment's catalog) as OpenEnv's MCP `Tool`s
    (`name`, `description`, `input_schema`)."""
    listed = []
    for schema in schemas:
        tool = mcp_tool(schema)
        listed.append(
            {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "input_schema": tool["inputSchema"],
            }
        )
    return listed


def _observation(observation: dict[str, Any], reward: float | None, done: bool) -> dict[str, Any]:
    return {"observation": observation, "reward": reward, "done": done}


def reset_result(session: LiveSession, transport: str) -> dict[str, Any]:
    """The answer to a reset: the opening messages, the tools, and the episode's ids in `metadata`."""
    meta = {**session.identity(), "transport": transport}
    observation = {
        "messages": session.env.messages,
        "tools": tools(session.tools),
        "metadata": {EPISODE_META_KEY: meta},
    }
    return _observation(observation, None, False)


def list_tools_result(session: LiveSession) -> dict[str, Any]:
    """The answer to a `list_tools` action (OpenEnv's `ListToolsObservation`); the episode is unchanged."""
    observation = {
        "tools": tools(session.tools),
        "metadata": {EPISODE_META_KEY: {"session_id": session.id}},
    }
    return _observation(observation, None, session.env.done)


def catalog_tools_result(entry: EnvironmentEntry) -> dict[str, Any]:
    """The answer to a `list_tools` before any reset: the environment's catalog tools (what
    `GET /v1/environments/{env}` lists), since OpenEnv lists tools without an episode. An environment
    whose tools vary by task (`tool_call`) lists every tool a task may offer; a reset lists the task's."""
    observation = {"tools": tools(entry.cls.catalog_tools()), "metadata": {}}
    return _observation(observation, None, False)


def fresh_state(entry: EnvironmentEntry) -> dict[str, Any]:
    """OpenEnv's `State` before any reset (its own server answers a fresh environment's): no episode."""
    return {"episode_id": None, "step_count": 0, "env": entry.name, "done": False}


def _error_type(text: str) -> str:
    """OpenEnv's `ToolErrorType` for a failed call's tool message (the engine's wording, tools.py)."""
    if text.startswith("Error: unknown tool"):
        return "tool_not_found"
    if "arguments for" in text:
        return "invalid_args"
    if "timed out" in text:
        return "timeout"
    return "execution_error"


def step_result(session_id: str, action: CallTool | SendMessage, result: StepResult) -> dict[str, Any]:
    """The answer to a step. A `call_tool` answers OpenEnv's `CallToolObservation`: the tool's text as
    an MCP `CallToolResult` (`data` is the text), or, for a call the gym answered with an error tool
    message, `result: None` and `error: {error_type, message}`, as OpenEnv's MCP environments do. A
    `message` answers the environment's reply messages. Both carry the gym's `done`, `reward` (on the
    step that ends the episode) and `info` in `metadata`."""
    meta = {
        EPISODE_META_KEY: {
            "session_id": session_id,
            "done": result.done,
            "reward": result.reward,
            "info": result.info,
        }
    }
    observation: dict[str, Any]
    if isinstance(action, SendMessage):
        observation = {"messages": result.messages, "metadata": meta}
    else:
        text = tool_reply(result.messages, result.info)
        observation = {"tool_name": action.tool_name, "result": None, "error": None, "metadata": meta}
        if text is not None and is_tool_error(text):
            observation["error"] = {"error_type": _error_type(text), "message": text}
        else:  # no reply (the environment ended the episode without one) is a result with no content
            observation["result"] = {
                "content": [] if text is None else [{"type": "text", "text": text}],
                "structured_content": None,
                "data": text,
                "is_error": False,
            }
    return _observation(observation, result.reward, result.done)


def state(session: LiveSession) -> dict[str, Any]:
    """OpenEnv's `State` (`episode_id`, `step_count`) with the gym's facts beside them (its `State`
    allows extra fields)."""
    env = session.env
    verified = session.verified
    return {
        "episode_id": session.id,
        "step_count": env.turns,
        "env": session.entry.name,
        "task_id": env.task.id,
        "seed": env.seed,
        "done": env.done,
        "done_reason": env.done_reason,
        "reward": verified.reward if verified is not None else None,
        "max_turns": session.max_turns,
    }


def error_data(message: str, code: str, **extra: Any) -> dict[str, Any]:
    """An OpenEnv error's `data`: its `message` and `code`, then anything that helps the client."""
    return {"message": message, "code": code, **extra}


def _code(exc: GymError, opening: bool) -> str:
    if isinstance(exc, AtCapacity):
        return CAPACITY_REACHED
    if exc.status in (413, 422):
        return VALIDATION_ERROR
    if opening and exc.status == 404:
        return FACTORY_ERROR  # no environment could be made for this reset (unknown env, task or split)
    if exc.status in (404, 409, 410):
        return SESSION_ERROR
    return EXECUTION_ERROR


def gym_error_data(exc: GymError, *, opening: bool = False) -> dict[str, Any]:
    """A gym error as OpenEnv's error `data`: the native `detail` as `message`, an OpenEnv code, and the
    problem+json fields (`status`, `retry_after_s`, ...) under `problem`. At capacity it also carries
    OpenEnv's `max_sessions`, as its own server's CAPACITY_REACHED does."""
    extra: dict[str, Any] = {"problem": problem_data(exc)}
    if isinstance(exc, AtCapacity) and "limit" in exc.extra:
        extra["max_sessions"] = exc.extra["limit"]
    return error_data(exc.detail, _code(exc, opening), **extra)
