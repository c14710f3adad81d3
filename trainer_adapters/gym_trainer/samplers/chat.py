"""Message-level sampling from any OpenAI-compatible chat API, for evaluation only.

The provider renders the chat, tokenizes, samples and parses tool calls on its side, so the tokens a
trainer would need are unknown: `token_exact = False`, and the driver refuses this sampler when asked
for training data. It is what `gym-server eval --policy URL` uses against a hosted API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from gym_trainer.samplers._http import bearer_headers, post_json, server_root
from gym_trainer.samplers.base import ChatSample, PolicyError, SamplingParams

__all__ = ["OpenAIChatSampler"]


class OpenAIChatSampler:
    """`POST /v1/chat/completions` with the episode's messages and tools.

    Args:
        base_url: the API root, with or without `/v1`.
        model: the model name the API expects.
        api_key: bearer token, when the API needs one.
        timeout_s: longest wait for one answer.
    """

    token_exact = False

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        weight_version: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = server_root(base_url)
        self.model = model
        self.weight_version = weight_version
        headers = bearer_headers(api_key)
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            headers=headers,
            transport=transport,
            follow_redirects=False,  # see `_http`: the key goes only where it was sent
        )

    def __repr__(self) -> str:
        return f"OpenAIChatSampler({self.base_url!r}, model={self.model!r})"

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "openai-chat",
            "base_url": self.base_url,
            "model": self.model,
            "weight_version": self.weight_version,
            "token_exact": False,
        }

    async def aclose(self) -> None:
        await self._http.aclose()

    async def chat(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], params: SamplingParams
    ) -> ChatSample:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if tools:
            body["tools"] = list(tools)
        if params.seed is not None:
            body["seed"] = params.seed
        data = await post_json(self._http, f"{self.base_url}/v1/chat/completions", body)
        try:
            choice = data["choices"][0]
            message = dict(choice["message"])
        except (KeyError, IndexError, TypeError) as exc:
            raise PolicyError("the chat answer has no choices[0].message") from exc
        if message.get("role") != "assistant":
            message["role"] = "assistant"
        usage = data.get("usage") or {}
        return ChatSample(
            message={k: v for k, v in message.items() if k in ("role", "content", "tool_calls")},
            finish_reason=str(choice.get("finish_reason") or "stop"),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )
