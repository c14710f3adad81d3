"""The tokenizer's own response parsing: `tokenizer.parse_response` (transformers >= 5.13) with the
`response_template` a tokenizer declares (shipped in its `tokenizer_config.json`, or set by TRL's
`add_response_schema` for the chat templates TRL knows).

When a policy's tokenizer declares one, the model authors' parser reads its turns rather than ours: it
knows the template's prefill (an opened `<think>`, gpt-oss's role header), which is why it needs the
prompt that preceded the turn (`prefix`). A turn it cannot read (transformers raises `ValueError` for
a region that is not JSON, a cut call, ...) is a parse error like any other format's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_trainer.toolcalls._base import ParsedTurn, failed, make_call

__all__ = ["TemplateParser"]

_FMT = "template"


class TemplateParser:
    """Reads turns with `tokenizer.parse_response` and the tokenizer's `response_template`."""

    def __init__(self, tokenizer: Any) -> None:
        if getattr(tokenizer, "response_template", None) is None:
            raise ValueError("the tokenizer declares no response_template")
        self.tokenizer = tokenizer

    def __repr__(self) -> str:
        return f"TemplateParser({type(self.tokenizer).__name__})"

    @classmethod
    def of(cls, tokenizer: Any) -> TemplateParser | None:
        """A parser for `tokenizer` if it declares a response template (and can parse with it)."""
        if getattr(tokenizer, "response_template", None) is None:
            return None
        if not callable(getattr(tokenizer, "parse_response", None)):
            return None
        return cls(tokenizer)

    def parse(
        self,
        text: str,
        special_text: str,
        call_id_prefix: str,
        *,
        prefix: str = "",
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> ParsedTurn:
        """Parse `special_text` (the turn with its special tokens, end-of-turn included) after `prefix`
        (the text the model was prompted with); `text` (without special tokens) is what the
        environment gets when the turn cannot be read."""
        try:
            message = self.tokenizer.parse_response(
                special_text, prefix=prefix, tools=[dict(t) for t in tools] if tools else None
            )
        except (ValueError, KeyError) as exc:
            reason = str(exc).split("\n", 1)[0]
            return failed(text, f"the tokenizer's response template could not read the turn: {reason}", _FMT)
        return _turn(message, text, call_id_prefix)


def _turn(message: Mapping[str, Any], text: str, prefix: str) -> ParsedTurn:
    calls: list[dict[str, Any]] = []
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function", call) if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            return failed(text, f"tool call {index} has no function name", _FMT)
        assert isinstance(function, Mapping)
        calls.append(make_call(name, function.get("arguments", {}), index, prefix))
    content = message.get("content")
    reasoning = message.get("reasoning_content", message.get("thinking"))
    return ParsedTurn(
        content=content.strip() or None if isinstance(content, str) else None,
        tool_calls=calls,
        format=_FMT,
        reasoning=reasoning.strip() or None if isinstance(reasoning, str) else None,
    )
