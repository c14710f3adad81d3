"""What one chat call through the gateway leaves on the episode: read from the upstream's answer, whole
or streamed, and kept as a record in the trajectory's `turns`.

The token fields are vLLM's (`return_token_ids: true`, `logprobs: true`): `prompt_token_ids` at the top
level of the answer (of the first chunk when streamed), `choices[0].token_ids` (extended chunk by chunk
when streamed) and `choices[0].logprobs.content[].logprob`. Pure parsing, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import orjson

__all__ = ["SOURCE", "Completed", "StreamAssembler", "call_record", "from_answer"]

# `turns` entries written by the gateway carry `"source": SOURCE`; other entries are a driver's turn data.
SOURCE: Final = "gateway"


@dataclass(slots=True)
class Completed:
    """One finished upstream completion (its first choice: the gateway refuses `n` > 1)."""

    message: dict[str, Any]
    finish_reason: str | None
    model: str | None = None
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None

    @property
    def token_exact(self) -> bool:
        """Whether the upstream gave the prompt's and the completion's token ids, and a logprob each."""
        return (
            self.prompt_ids is not None
            and self.completion_ids is not None
            and self.logprobs is not None
            and len(self.logprobs) == len(self.completion_ids)
        )


def _ids(value: Any) -> list[int] | None:
    # The types' set, made in C: a Python loop over a prompt's thousands of ids cost more than the rest
    # of the record. `type(x) is int` leaves out bools and int subclasses, as the check should.
    if isinstance(value, list) and set(map(type, value)) <= {int}:
        return value
    return None


def _logprobs(choice: dict[str, Any]) -> list[float] | None:
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    values: list[float] = []
    for item in content:
        value = item.get("logprob") if isinstance(item, dict) else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        values.append(float(value))
    return values


def from_answer(answer: Any) -> Completed:
    """The completion in a whole (non-streamed) chat answer.

    Raises:
        ValueError: not a chat completion (no first choice with a message).
    """
    choices = answer.get("choices") if isinstance(answer, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise ValueError("the upstream's answer is not a chat completion (no choices[0].message)")
    return Completed(
        message=choice["message"],
        finish_reason=choice.get("finish_reason"),
        model=answer.get("model"),
        prompt_ids=_ids(answer.get("prompt_token_ids") or choice.get("prompt_token_ids")),
        completion_ids=_ids(choice.get("token_ids")),
        logprobs=_logprobs(choice),
    )


@dataclass(slots=True)
class StreamAssembler:
    """Reads an upstream's server-sent chat chunks as they pass through, and assembles the completion.

    `feed` takes raw bytes as they arrive (events may be split anywhere); `done` is set by `[DONE]`.
    A stream that ends without a finish reason was cut: `complete` is False and nothing is recorded.
    """

    _buffer: bytes = b""
    done: bool = False
    model: str | None = None
    role: str = "assistant"
    content: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    error: str | None = None

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while True:
            end = _event_end(self._buffer)
            if end is None:
                return
            event, self._buffer = self._buffer[: end[0]], self._buffer[end[1] :]
            for line in event.splitlines():
                if line.startswith(b"data:"):
                    self._data(line[5:].strip())

    @property
    def complete(self) -> bool:
        return self.error is None and self.finish_reason is not None

    def _data(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.error = "the upstream's stream holds an event that is not JSON"
            return
        if not isinstance(payload, dict):
            return
        if isinstance(payload.get("error"), dict):
            self.error = str(payload["error"].get("message") or "the upstream's stream reported an error")
            return
        self.model = payload.get("model") or self.model
        if (ids := _ids(payload.get("prompt_token_ids"))) is not None:
            self.prompt_ids = ids
        for choice in payload.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        if (ids := _ids(choice.get("prompt_token_ids"))) is not None:
            self.prompt_ids = ids
        if (ids := _ids(choice.get("token_ids"))) is not None:
            self.completion_ids = (self.completion_ids or []) + ids
        if (values := _logprobs(choice)) is not None:
            self.logprobs = (self.logprobs or []) + values
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self.role = delta.get("role") or self.role
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                self._tool_call(call)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def _tool_call(self, delta: Any) -> None:
        if not isinstance(delta, dict):
            return
        call = self.tool_calls.setdefault(
            int(delta.get("index", 0)),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        call["id"] = delta.get("id") or call["id"]
        function = delta.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""

    def result(self) -> Completed:
        message: dict[str, Any] = {"role": self.role, "content": "".join(self.content) or None}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[key] for key in sorted(self.tool_calls)]
        return Completed(
            message, self.finish_reason, self.model, self.prompt_ids, self.completion_ids, self.logprobs
        )


def _event_end(buffer: bytes) -> tuple[int, int] | None:
    """Where the first server-sent event in `buffer` ends, and where the next one starts."""
    ends = [(i, i + len(sep)) for sep in (b"\r\n\r\n", b"\n\n", b"\r\r") if (i := buffer.find(sep)) >= 0]
    return min(ends) if ends else None


def call_record(
    index: int,
    request: dict[str, Any],
    completed: Completed,
    *,
    stream: bool,
    upstream_ms: float,
    gateway_ms: float,
) -> dict[str, Any]:
    """The `turns` entry of one complete call (`prompt_ids`/`completion_ids`, as drivers name them)."""
    exact = completed.token_exact
    return {
        "source": SOURCE,
        "call": index,
        "stream": stream,
        "model": completed.model,
        "messages": request.get("messages"),
        "tools": request.get("tools"),
        "response": completed.message,
        "finish_reason": completed.finish_reason,
        "token_exact": exact,
        "prompt_ids": completed.prompt_ids if exact else None,
        "completion_ids": completed.completion_ids if exact else None,
        "logprobs": completed.logprobs if exact else None,
        "upstream_ms": round(upstream_ms, 3),
        "gateway_ms": round(gateway_ms, 3),
    }
