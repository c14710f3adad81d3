"""Token-exact rendering without a local tokenizer: ask the policy server's `/tokenize`.

The gym's server-driven rollouts (`POST /v1/rollouts`) run in a process that must not import
transformers, yet must keep episodes token-exact. vLLM (and `gym-server policy serve`) expose
`POST /tokenize` (a text `prompt`, or chat `messages` + `tools` through the model's chat template) and
`POST /detokenize`; `RemoteRenderer` builds the same prompt-once, delta-after renderer as
`ChatRenderer` on top of them, working in token space:

- the end-of-turn token is found once, by tokenizing a probe conversation with and without a final
  assistant turn and reading the token that follows the assistant's content;
- a reply delta is `tokenize(probe + replies, generation prompt)` minus `tokenize(probe)` cut just after
  the probe's last end-of-turn token (the two must agree up to there, or no delta exists).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from gym_trainer.samplers._http import bearer_headers, post_json, server_root
from gym_trainer.samplers.base import PolicyError

__all__ = ["RemoteRenderer"]

_USER = {"role": "user", "content": "probe"}
_ASSISTANT = {"role": "assistant", "content": "probe"}


class RemoteRenderer:
    """A `Renderer` backed by a policy server's `/tokenize` and `/detokenize` (vLLM-compatible).

    Args:
        base_url: the policy server root (with or without `/v1`).
        model: the served model name.
        eos_token_ids: the end-of-turn ids, when known; found by probing otherwise.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        eos_token_ids: Sequence[int] | None = None,
        timeout_s: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
        api_key: str | None = None,
    ) -> None:
        self.base_url = server_root(base_url)
        self.model = model
        headers = bearer_headers(api_key)
        self._http = httpx.AsyncClient(
            timeout=timeout_s,
            transport=transport,
            headers=headers,
            follow_redirects=False,  # see `samplers._http`: the key goes only where it was sent
        )
        self._eos: frozenset[int] | None = frozenset(eos_token_ids) if eos_token_ids else None
        self._probe: list[int] | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"RemoteRenderer({self.base_url!r}, model={self.model!r})"

    @property
    def eos_token_ids(self) -> frozenset[int]:
        if self._eos is None:
            raise RuntimeError("call `await renderer.setup()` (or render a prompt) first")
        return self._eos

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _tokenize(self, **body: Any) -> list[int]:
        data = await post_json(self._http, f"{self.base_url}/tokenize", {"model": self.model, **body})
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise PolicyError("/tokenize answered without a token list")
        return tokens

    async def _chat(
        self, messages: Sequence[dict[str, Any]], generation: bool, tools: Any = None
    ) -> list[int]:
        body: dict[str, Any] = {"messages": list(messages), "add_generation_prompt": generation}
        if tools:
            body["tools"] = list(tools)
        return await self._tokenize(**body)

    async def setup(self) -> None:
        """Find the end-of-turn token and cache the probe conversation (once)."""
        async with self._lock:
            if self._probe is not None and self._eos is not None:
                return
            probe = await self._chat([_USER, _ASSISTANT], generation=False)
            if self._eos is None:
                header = await self._chat([_USER], generation=True)
                content = await self._tokenize(prompt="probe", add_special_tokens=False)
                at = len(header) + len(content)
                if probe[: len(header)] != header or probe[len(header) : at] != content or len(probe) <= at:
                    raise PolicyError("cannot find the end-of-turn token of this chat template")
                self._eos = frozenset({probe[at]})
            self._probe = probe

    async def prompt_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> list[int]:
        await self.setup()
        return await self._chat(messages, generation=True, tools=tools)

    async def delta_ids(self, replies: Sequence[dict[str, Any]]) -> list[int]:
        await self.setup()
        assert self._probe is not None
        after = await self._chat([_USER, _ASSISTANT, *replies], generation=True)
        ends = [i for i, token in enumerate(self._probe) if token in self.eos_token_ids]
        if not ends:
            raise PolicyError("the chat template does not end assistant turns with the end-of-turn token")
        cut = ends[-1] + 1
        if after[:cut] != self._probe[:cut]:
            raise PolicyError("the chat template re-renders earlier turns when replies follow")
        return after[cut:]

    async def text(self, ids: Sequence[int]) -> str:
        data = await post_json(
            self._http, f"{self.base_url}/detokenize", {"model": self.model, "tokens": list(ids)}
        )
        return str(data.get("prompt", ""))

    async def turn_text(self, ids: Sequence[int]) -> str:
        body = list(ids)
        while body and body[-1] in self.eos_token_ids:
            body.pop()
        return await self.text(body)
