"""Pure translations between the gym's session vocabulary and MCP's, kept apart from the SDK.

Nothing here imports `mcp`: these functions take and return plain dicts, so the rules of the facade
(which tool results are errors, what a gym error becomes on the JSON-RPC wire, how the episode's
opening reads as instructions) are tested without a server, and the SDK glue stays thin. Both
directions live here: the facade serves gym tools as MCP tools (`mcp_tool`, `is_tool_error`), and the
`mcp_tools` environments serve an MCP server's tools as gym tools (`openai_function`,
`tool_result_text`), with the same rule that a failed call is a tool message opening with "Error:".
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_server.core import jsontext
from gym_server.core.errors import GymError, InvalidRequest

__all__ = [
    "EPISODE_META_KEY",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "EpisodeParams",
    "assistant_tool_call",
    "episode_meta",
    "episode_over",
    "error_code",
    "instructions",
    "is_tool_error",
    "jsonrpc_error_body",
    "mcp_tool",
    "openai_function",
    "parse_episode_params",
    "problem_data",
    "tool_reply",
    "tool_result_text",
]

# JSON-RPC 2.0 codes (the spec's numbers; the SDK names the same ones).
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

# The `_meta` key under which results carry the gym's episode state. MCP reserves prefixes whose
# second label is `modelcontextprotocol` or `mcp`; ours is a plain label, as the spec allows.
EPISODE_META_KEY: Final = "gym-server/episode"

# Every failed tool call the gym's engine answers (bad JSON, invalid arguments, a tool that raised or
# timed out, a `ToolError`, one call too many) is a tool message opening with this.
_TOOL_ERROR_PREFIX: Final = "Error:"


class EpisodeParams(BaseModel):
    """The query parameters of an MCP endpoint URL that choose the episode (all optional).

    They mirror `POST /v1/sessions`: `task_id` names a task; without it a task is drawn from `split`
    by `seed` (no seed: a random one, reported in the initialize result's `_meta`).
    """

    model_config = ConfigDict(extra="forbid")

    task_id: str | None = Field(None, max_length=256)
    seed: int | None = Field(None, ge=0, lt=2**63)
    split: str | None = Field(None, max_length=128)
    run: str | None = Field(None, max_length=256)


def parse_episode_params(query: list[tuple[str, str]]) -> EpisodeParams:
    """The episode's parameters from a URL's query pairs.

    Raises:
        InvalidRequest: an unknown or repeated parameter, or a value of the wrong type (422).
    """
    names = [name for name, _ in query]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidRequest(f"query parameter given more than once: {', '.join(repeated)}")
    try:
        return EpisodeParams.model_validate(dict(query))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'query'}: {error['msg']}"
            for error in exc.errors()
        )
        raise InvalidRequest(
            f"bad MCP endpoint query ({problems}); accepted: task_id, seed, split, run"
        ) from None


def mcp_tool(openai_schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function schema (what the catalog and sessions hand out) as an MCP tool definition."""
    function = openai_schema["function"]
    parameters = dict(function.get("parameters") or {})
    parameters.setdefault("type", "object")  # MCP requires an object schema for a tool's input
    tool: dict[str, Any] = {"name": function["name"], "inputSchema": parameters}
    if function.get("description"):
        tool["description"] = function["description"]
    return tool


def openai_function(tool: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool definition (wire form, `inputSchema`) as an OpenAI function: `mcp_tool`'s inverse."""
    parameters = dict(tool.get("inputSchema") or {})
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    function: dict[str, Any] = {"name": tool["name"], "parameters": parameters}
    description = tool.get("description") or tool.get("title")
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def tool_result_text(result: dict[str, Any]) -> str:
    """A `tools/call` result (wire form) as the text of a gym tool message.

    Text blocks are kept in order; other blocks (images, audio, resources) are named, since a tool
    message carries text; `structuredContent` stands in when there is no content. A result with
    `isError` opens with "Error: ", as every failed gym tool call does.
    """
    parts: list[str] = []
    for block in result.get("content") or []:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource" and "text" in (block.get("resource") or {}):
            parts.append(str(block["resource"]["text"]))
        else:
            parts.append(f"[{kind} content ({block.get('mimeType', 'unknown type')}) not shown]")
    text = "\n".join(parts)
    if not parts and result.get("structuredContent") is not None:
        text = jsontext.dumps(result["structuredContent"]).decode()
    if result.get("isError"):
        return text if is_tool_error(text) else f"{_TOOL_ERROR_PREFIX} {text}"
    return text


def assistant_tool_call(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The assistant message one MCP `tools/call` stands for, in the native step's OpenAI form.

    The arguments travel as a JSON string, as OpenAI clients send them, so a trajectory reads the same
    whichever protocol played it; the engine assigns the tool-call id, as for a native call without one.
    """
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": name, "arguments": jsontext.dumps(arguments or {}).decode()},
            }
        ],
    }


def tool_reply(messages: list[dict[str, Any]], info: dict[str, Any]) -> str | None:
    """What one tool call's step answers, for the facades: the first reply's text; an "Error:" text when
    the environment crashed (the step stored `info["error"]` and ended the episode with `env_error`);
    None when the environment answered nothing and did not fail, which is a success with no output (the
    `tool_call` environment scores the call it is given without running it, and ends the episode)."""
    if messages:
        return str(messages[0].get("content") or "")
    if "error" in info:
        return f"{_TOOL_ERROR_PREFIX} {info['error']}"
    return None


def is_tool_error(content: str) -> bool:
    """Whether a tool message reports a failed call, so the MCP result carries `isError: true`."""
    return content.startswith(_TOOL_ERROR_PREFIX)


def episode_meta(
    session_id: str, *, done: bool, reward: float | None, info: dict[str, Any]
) -> dict[str, Any]:
    """The `_meta` of a `tools/call` result: where the episode stands after the step."""
    return {EPISODE_META_KEY: {"session_id": session_id, "done": done, "reward": reward, "info": info}}


def episode_over(reward: float | None, *, tools: bool = False) -> str:
    """What tells an agent its episode ended, in text, since frameworks read neither `_meta` nor `done`:
    the episode gateway's answer after the end, and (with `tools`) an episode-scoped MCP tool result."""
    score = "" if reward is None else f" (reward {round(reward, 4)})"
    if tools:
        return f"The episode is over{score}. Stop calling tools and give your final answer."
    return f"The episode is over{score}."


def instructions(env: str, task_id: str, messages: list[dict[str, Any]]) -> str:
    """The episode's opening messages as the initialize result's `instructions`, which MCP harnesses
    show their model: MCP has no other place for a system prompt and a task before the first call."""
    parts = [f"This MCP session is one episode of the gym environment {env!r} (task {task_id!r})."]
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else jsontext.dumps(content).decode()
        parts.append(f"[{message.get('role', 'user')}]\n{text}")
    return "\n\n".join(parts)


def error_code(status: int) -> int:
    """The JSON-RPC code for a gym error of HTTP `status`.

    A bad or unknown name in the request is INVALID_PARAMS; asking a finished, expired or unknown
    session for more is INVALID_REQUEST; capacity and backend trouble are INTERNAL_ERROR (the problem
    in `data` says which, with its `status` and `retry_after_s`).
    """
    if status == 422 or status == 413:
        return INVALID_PARAMS
    if 400 <= status < 500 and status != 429:
        return INVALID_REQUEST
    return INTERNAL_ERROR


def problem_data(exc: GymError) -> dict[str, Any]:
    """The problem+json fields of `exc` (as the native API renders it), for a JSON-RPC error's `data`."""
    data: dict[str, Any] = {
        "type": f"urn:gym-server:problem:{exc.slug}",
        "title": exc.title,
        "status": exc.status,
        "detail": exc.detail,
        **exc.extra,
    }
    retry_after = getattr(exc, "retry_after_s", None)
    if retry_after is not None:
        data["retry_after_s"] = retry_after
    return data


def jsonrpc_error_body(exc: GymError, request_id: str | int | None) -> bytes:
    """A JSON-RPC error response for `exc`, sent at the HTTP status the native API would use."""
    error = {"code": error_code(exc.status), "message": exc.detail, "data": problem_data(exc)}
    return jsontext.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}, default=str)
