"""Chat messages in the OpenAI wire format, validated once where they enter the gym.

Only the incoming assistant message of a step is validated; the transcript is then kept as plain dicts,
so a long episode is never re-validated turn after turn (the hot path pays for one small model).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["FunctionCall", "Message", "ToolCall", "check_text", "tool_call_message", "tool_message"]

Role = Literal["system", "user", "assistant", "tool"]


def check_text(value: str) -> str:
    """Return `value` if it can be encoded as UTF-8; raise ValueError (a 422 in a model) otherwise."""
    # A lone surrogate survives json.loads but cannot be encoded to UTF-8, so it could be neither
    # stored nor sent back: reject it here with a clear 422 instead of failing later.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text holds an unpaired UTF-16 surrogate at position {exc.start}") from None
    return value


class FunctionCall(BaseModel):
    """The function of a tool call; `arguments` is a JSON string as OpenAI sends it (or an object)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256)
    arguments: str | dict[str, Any] = "{}"

    @field_validator("name")
    @classmethod
    def _name_text(cls, value: str) -> str:
        return check_text(value)

    @field_validator("arguments")
    @classmethod
    def _arguments_text(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        return check_text(value) if isinstance(value, str) else value


class ToolCall(BaseModel):
    """One tool call of an assistant message."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, max_length=256)
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    """A chat message. Steps accept assistant messages; environments emit the other roles."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @field_validator("content", "reasoning_content")
    @classmethod
    def _content_text(cls, value: str | None) -> str | None:
        return None if value is None else check_text(value)

    def to_dict(self) -> dict[str, Any]:
        """The message as a plain dict without unset fields, the form transcripts are kept in."""
        return self.model_dump(exclude_none=True)


def tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    """A tool reply in transcript form."""
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def tool_call_message(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """An assistant message making one tool call, as scripted policies and reference solutions send it."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}
