"""Token-in sampling over HTTP: vLLM's `/v1/completions`, or `gym-server policy serve` on a CPU.

The request is the design brief's: `prompt` as a list of token ids, `return_token_ids: true` and
`logprobs: 0`; the answer's `choices[0].token_ids` and `choices[0].logprobs.token_logprobs` are kept
verbatim. On the vLLM side, start the server with `--logprobs-mode processed_logprobs` so the logprobs
are those of the distribution actually sampled (after temperature), which TRL's importance ratio
compares against. `model` may name a LoRA adapter served by vLLM (`--lora-modules name=path`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx

from gym_trainer.samplers._http import bearer_headers, post_json, server_root
from gym_trainer.samplers.base import PolicyError, SamplingParams, TokenSample

__all__ = ["CompletionsSampler"]


class CompletionsSampler:
    """Samples from an OpenAI-compatible completions endpoint that accepts and returns token ids.

    Args:
        base_url: the server root, e.g. `http://127.0.0.1:8001` (with or without `/v1`).
        model: the served model (or LoRA adapter) name.
        timeout_s: the longest one sample may take before the turn ends as `policy_timeout`.
        weight_version: recorded with each trajectory; a trainer updates it after each weight sync.
        api_key: sent as a bearer token when the server wants one.
        seed_requests: send each request's sampling seed. vLLM's CPU build (0.32.0) kills its engine on
            a seeded request whose prefill is chunked (`CPU Generator does not use offset`, under a few
            dozen concurrent requests), so the vLLM recipes on a CPU pass False: sampling is then not
            reproducible request by request.
    """

    token_exact = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout_s: float = 300.0,
        weight_version: str | None = None,
        api_key: str | None = None,
        max_connections: int = 256,
        extra_body: dict[str, Any] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        seed_requests: bool = True,
    ) -> None:
        self.base_url = server_root(base_url)
        self.seed_requests = seed_requests
        self.model = model
        self.weight_version = weight_version
        self.extra_body = dict(extra_body or {})
        headers = bearer_headers(api_key)
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=10.0, pool=timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            headers=headers,
            transport=transport,
            follow_redirects=False,  # see `_http`: the key goes only where it was sent
        )

    def __repr__(self) -> str:
        return f"CompletionsSampler({self.base_url!r}, model={self.model!r})"

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "completions",
            "base_url": self.base_url,
            "model": self.model,
            "weight_version": self.weight_version,
            "token_exact": True,
        }

    async def aclose(self) -> None:
        await self._http.aclose()

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "n": 1,
            **self.extra_body,
        }
        if params.seed is not None and self.seed_requests:
            body["seed"] = params.seed
        if stop_token_ids:
            body["stop_token_ids"] = list(stop_token_ids)
        data = await post_json(self._http, f"{self.base_url}/v1/completions", body)
        return parse_completion(data)


def parse_completion(data: dict[str, Any]) -> TokenSample:
    """The first choice of a vLLM-shaped completions answer, validated; garbage is a `PolicyError`."""
    try:
        choice = data["choices"][0]
        token_ids = choice["token_ids"]
        logprobs = (choice.get("logprobs") or {})["token_logprobs"]
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError) as exc:
        raise PolicyError(
            "the answer has no choices[0].token_ids / logprobs.token_logprobs "
            "(is return_token_ids supported? vLLM >= 0.10.2)"
        ) from exc
    if not isinstance(token_ids, list) or not all(isinstance(t, int) and t >= 0 for t in token_ids):
        raise PolicyError("token_ids is not a list of token ids")
    if not token_ids:
        raise PolicyError("the policy returned an empty completion (no tokens)")
    if not isinstance(logprobs, list) or len(logprobs) != len(token_ids):
        raise PolicyError("logprobs do not match the token ids one for one")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in logprobs):
        raise PolicyError("logprobs must be finite numbers (a NaN would poison the trainer's loss)")
    return TokenSample(token_ids, [float(v) for v in logprobs], "length" if finish == "length" else "stop")
