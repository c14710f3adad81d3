"""Talking to an OpenAI-compatible policy server: where its root is, how to authenticate, and one POST
with the policy's error classes and safe retries.

Sampling has no side effects, so any failed attempt may be repeated; the retries are still bounded
(a dead policy must end the episode as `policy_error`, not hang it), and a timeout is not retried
(it already cost the whole timeout; the driver records `policy_timeout`).

Redirects are never followed (every client here says `follow_redirects=False`, not trusting httpx's
default): the gym checks the policy URL a request names against its allow-list (`gym_server.core.egress`),
and a 3xx must not carry the request, and its bearer key, anywhere else. A 3xx is a `PolicyError`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from gym_trainer.samplers.base import PolicyError, PolicyTimeout

__all__ = ["bearer_headers", "post_json", "server_root"]

_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def server_root(base_url: str) -> str:
    """The server's root for a URL given with or without `/v1`: vLLM's `/tokenize` and `/detokenize`
    live beside `/v1`, not below it, so every path is built from the root."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """The authorization header for `api_key`, or none when the server wants no key."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


async def post_json(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], *, attempts: int = 3, backoff_s: float = 0.2
) -> dict[str, Any]:
    """POST `body`, return the JSON object answered; raise `PolicyError`/`PolicyTimeout` otherwise."""
    last = "no attempt"
    for attempt in range(attempts):
        try:
            response = await client.post(url, json=body)
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
                last = f"{type(exc).__name__}"
            else:
                raise PolicyTimeout(f"the policy did not answer in time ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if response.status_code == 200:
                try:
                    data = response.json()
                except ValueError as exc:
                    raise PolicyError("the policy answered with something that is not JSON") from exc
                if not isinstance(data, dict):
                    raise PolicyError("the policy answered with JSON that is not an object")
                return data
            last = f"HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code not in _RETRY_STATUSES:
                raise PolicyError(f"the policy refused the request: {last}")
        if attempt + 1 < attempts:
            await asyncio.sleep(backoff_s * 2**attempt)
    raise PolicyError(f"the policy failed {attempts} times; last: {last}")
