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

__all__ = ["SOURCE", "Completed", "Malformed", "StreamAssembler", "call_record", "events_end", "from_answer"]

# `turns` entries written by the gateway carry `"source": SOURCE`; other entries are a driver's turn data.
SOURCE: Final = "gateway"
_EVENT_ENDS: Final = (b"\r\n\r\n", b"\n\n", b"\r\r")  # a blank line, whichever the line end


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


class Malformed(ValueError):
    """An upstream chunk or answer whose shape is not OpenAI's; the message says which field."""


_KINDS: Final[dict[type, str]] = {str: "a string", dict: "an object", list: "a list"}


def _optional(value: Any, kind: type, where: str) -> Any:
    if value is not None and not isinstance(value, kind):
        raise Malformed(f"{where} is not {_KINDS[kind]}")
    return value


def _index(value: Any, where: str) -> int:
    if type(value) is not int:  # null, bools and strings are not indexes
        raise Malformed(f"{where} is not an integer")
    return value


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
        ValueError: not a chat completion (no first choice with a message, a field of another type).
    """
    choices = answer.get("choices") if isinstance(answer, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise ValueError("the upstream's answer is not a chat completion (no choices[0].message)")
    return Completed(
        message=choice["message"],
        finish_reason=_optional(choice.get("finish_reason"), str, "choices[0].finish_reason"),
        model=_optional(answer.get("model"), str, "model"),
        prompt_ids=_ids(answer.get("prompt_token_ids") or choice.get("prompt_token_ids")),
        completion_ids=_ids(choice.get("token_ids")),
        logprobs=_logprobs(choice),
    )


@dataclass(slots=True)
class _ToolCall:
    """A streamed tool call's parts, joined once at the end (appending to a string is quadratic)."""

    id: str | None = None
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        function = {"name": "".join(self.name), "arguments": "".join(self.arguments)}
        return {"id": self.id, "type": "function", "function": function}


@dataclass(slots=True)
class StreamAssembler:
    """Reads an upstream's server-sent chat chunks as they pass through, and assembles the completion.

    `feed` takes raw bytes as they arrive (events and lines may be split anywhere) and costs time in
    proportion to them: the unfinished line is kept as pieces and joined once it ends, ids and logprobs
    are appended to, never rebuilt (a rescan of the buffer and a copy of the ids per event made a long
    stream quadratic: 22 s of the event loop's CPU for 64k one-token events, issue 37).

    Two bounds keep what a stream can make the gym hold within the episode's remaining transcript
    budget, `budget` (bytes): an event (its lines up to the blank line that ends it) larger than it is
    refused, and so is a completion whose assembled parts (content, tool calls, ids, logprobs, sized as
    their JSON) outgrow it; `over_budget` then says so. A chunk whose shape is not OpenAI's (a tool
    call's `index` that is not an integer, `choices` that is not a list...) is an `error`, not a crash.
    After an error nothing more is read. `done` is set by `[DONE]`; a stream that ends without a finish
    reason was cut: `complete` is False and nothing is recorded.
    """

    budget: int
    done: bool = False
    model: str | None = None
    role: str = "assistant"
    content: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    error: str | None = None
    over_budget: bool = False
    kept: int = 0  # bytes of the completion assembled so far (the JSON of its parts)
    _line: list[bytes] = field(default_factory=list)  # the pieces of a line not ended yet
    _line_bytes: int = 0
    _event: list[bytes] = field(default_factory=list)  # the `data:` lines of the event not ended yet
    _event_bytes: int = 0
    _after_cr: bool = False  # the last chunk ended with CR: a LF starting the next one ends nothing

    def feed(self, chunk: bytes) -> None:
        if self.error is not None:
            return
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        if not chunk:
            return
        self._after_cr = chunk[-1:] == b"\r"
        lines = chunk.splitlines()  # CR, LF and CRLF: the line ends of server-sent events
        tail = None if chunk[-1:] in (b"\r", b"\n") else lines.pop()
        for line in lines:
            if self._line:
                self._line.append(line)
                line = b"".join(self._line)
                self._line.clear()
                self._line_bytes = 0
            self._line_ended(line)
            if self.error is not None:
                return
        if tail is not None:
            self._line.append(tail)
            self._line_bytes += len(tail)
            if self._event_bytes + self._line_bytes > self.budget:
                self._too_large("an event of the stream")

    @property
    def complete(self) -> bool:
        return self.error is None and self.finish_reason is not None

    def _line_ended(self, line: bytes) -> None:
        if line:
            self._event_bytes += len(line)
            if self._event_bytes > self.budget:
                self._too_large("an event of the stream")
            elif line.startswith(b"data:"):
                self._event.append(line[5:].strip())
            return
        events, self._event, self._event_bytes = self._event, [], 0  # a blank line: the event is whole
        for data in events:
            try:
                self._data(data)
            except Malformed as exc:
                self.error = f"the upstream's stream holds a malformed chunk: {exc}"
            if self.error is not None:
                return

    def _too_large(self, what: str) -> None:
        self.over_budget = True
        self.error = f"{what} is larger than the episode's remaining transcript budget ({self.budget} bytes)"

    def _keep(self, value: Any) -> None:
        self.kept += len(orjson.dumps(value))
        if self.kept > self.budget:
            self._too_large("the completion")

    def _data(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise Malformed("an event is not JSON") from None
        if not isinstance(payload, dict):
            raise Malformed("an event is not a JSON object")
        if isinstance(payload.get("error"), dict):
            self.error = str(payload["error"].get("message") or "the upstream's stream reported an error")
            return
        self.model = _optional(payload.get("model"), str, "model") or self.model
        if (ids := _ids(payload.get("prompt_token_ids"))) is not None:
            self.prompt_ids = ids
        choices = _optional(payload.get("choices"), list, "choices") or []
        for n, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise Malformed(f"choices[{n}] is not an object")
            if _index(choice.get("index", 0), f"choices[{n}].index") == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        if (ids := _ids(choice.get("prompt_token_ids"))) is not None:
            self.prompt_ids = ids
        if (ids := _ids(choice.get("token_ids"))) is not None:
            self._keep(ids)
            if self.completion_ids is None:
                self.completion_ids = ids
            else:
                self.completion_ids.extend(ids)
        if (values := _logprobs(choice)) is not None:
            self._keep(values)
            if self.logprobs is None:
                self.logprobs = values
            else:
                self.logprobs.extend(values)
        delta = _optional(choice.get("delta"), dict, "choices[0].delta") or {}
        self.role = _optional(delta.get("role"), str, "choices[0].delta.role") or self.role
        if (content := _optional(delta.get("content"), str, "choices[0].delta.content")) is not None:
            self._keep(content)
            self.content.append(content)
        calls = _optional(delta.get("tool_calls"), list, "choices[0].delta.tool_calls") or []
        for n, call in enumerate(calls):
            self._tool_call(call, f"choices[0].delta.tool_calls[{n}]")
        reason = _optional(choice.get("finish_reason"), str, "choices[0].finish_reason")
        self.finish_reason = reason or self.finish_reason

    def _tool_call(self, delta: Any, where: str) -> None:
        if not isinstance(delta, dict):
            raise Malformed(f"{where} is not an object")
        index = _index(delta.get("index", 0), f"{where}.index")
        call_id = _optional(delta.get("id"), str, f"{where}.id")
        function = _optional(delta.get("function"), dict, f"{where}.function") or {}
        name = _optional(function.get("name"), str, f"{where}.function.name") or ""
        arguments = _optional(function.get("arguments"), str, f"{where}.function.arguments") or ""
        self._keep([call_id, name, arguments])
        call = self.tool_calls.setdefault(index, _ToolCall())
        call.id = call_id or call.id
        call.name.append(name)
        call.arguments.append(arguments)

    def result(self) -> Completed:
        message: dict[str, Any] = {"role": self.role, "content": "".join(self.content) or None}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[key].message() for key in sorted(self.tool_calls)]
        return Completed(
            message, self.finish_reason, self.model, self.prompt_ids, self.completion_ids, self.logprobs
        )


def events_end(chunk: bytes) -> int:
    """Where the last server-sent event ending in `chunk` ends (after its blank line), or -1. Searched
    from the end, which is where a chunk's last event usually ends."""
    return max((at + len(sep) for sep in _EVENT_ENDS if (at := chunk.rfind(sep)) >= 0), default=-1)


def call_record(
    index: int,
    request: dict[str, Any],
    completed: Completed,
    *,
    stream: bool,
    upstream_ms: float,
    gateway_ms: float,
    weight_version: str | None = None,
) -> dict[str, Any]:
    """The `turns` entry of one complete call (`prompt_ids`/`completion_ids`, as drivers name them);
    `weight_version`: the policy revision that sampled it (the episode's `policy.weight_version`)."""
    exact = completed.token_exact
    return {
        "source": SOURCE,
        "call": index,
        "stream": stream,
        "model": completed.model,
        "weight_version": weight_version,
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
