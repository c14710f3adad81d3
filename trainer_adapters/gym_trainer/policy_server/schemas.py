"""Request bodies of the local policy server: the subset of vLLM's OpenAI-compatible fields it honours.

Unknown fields are ignored rather than refused, as vLLM and OpenAI clients send many (`stream: false`,
`user`, `frequency_penalty` at its default...). Fields that would change the output and are not
implemented (`stream: true` on `/v1/completions`, `echo`, `best_of`, penalties) are refused with a 400.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ChatRequest", "CompletionRequest", "DetokenizeRequest", "TokenizeRequest"]


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")
    STREAMS: ClassVar[bool] = False  # whether the route answers `stream: true`

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    n: int = Field(1, ge=1, le=64)
    stream: bool = False
    return_token_ids: bool = False
    stop_token_ids: list[int] | None = None

    def unsupported(self) -> str | None:
        """Why this request cannot be served as asked, or None."""
        if self.stream and not self.STREAMS:
            return "stream=true is not supported by the local policy server on this route"
        extra = self.model_extra or {}
        for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
            if extra.get(name) not in (None, 0, 0.0) and not (
                name == "repetition_penalty" and extra[name] == 1
            ):
                return f"{name} is not supported by the local policy server"
        if extra.get("best_of") not in (None, 1):
            return "best_of is not supported by the local policy server"
        if extra.get("stop"):
            return "stop strings are not supported; the turn ends at the end-of-turn token"
        return None


class CompletionRequest(_Sampling):
    """POST /v1/completions: `prompt` as text, token ids, or a batch of either."""

    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    skip_special_tokens: bool = True


class ChatRequest(_Sampling):
    """POST /v1/chat/completions: messages and tools, rendered with the model's chat template.

    `stream: true` is answered as OpenAI's stream of chunks (see `app._chat_events`), for agent
    programs that only stream (verifiers' chat harness)."""

    STREAMS: ClassVar[bool] = True

    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream_options: dict[str, Any] | None = None


class TokenizeRequest(BaseModel):
    """POST /tokenize (vLLM): a text `prompt`, or chat `messages` rendered by the chat template."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool | None = None


class DetokenizeRequest(BaseModel):
    """POST /detokenize (vLLM): token ids back to text, special tokens included."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    tokens: list[int]
