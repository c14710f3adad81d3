"""A fast OpenAI-compatible chat upstream for `benchmarks/gateway.py`: answers every chat call at once
with a fixed assistant message and vLLM's token fields (`prompt_token_ids`, `choices[0].token_ids`,
`logprobs.content`), whole or as server-sent chunks, so what the benchmark times beyond this server's
own answer is the gateway.

Runs from the gym's venv: `python -m uvicorn --app-dir benchmarks/peers chat_echo:app --loop uvloop
--http httptools`. `CHAT_ECHO_PROMPT_IDS` and `CHAT_ECHO_COMPLETION_IDS` set the answer's size;
`CHAT_ECHO_LATENCY_MS` (default 0) makes every answer wait that long before its first byte, whole or
streamed alike, as a small model's decode would: a sleep, so the waiting costs this server no CPU.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

PROMPT_IDS = int(os.environ.get("CHAT_ECHO_PROMPT_IDS", "600"))
COMPLETION_IDS = int(os.environ.get("CHAT_ECHO_COMPLETION_IDS", "40"))
LATENCY_S = float(os.environ.get("CHAT_ECHO_LATENCY_MS", "0")) / 1000

_CHOICE = {
    "index": 0,
    "message": {"role": "assistant", "content": "add(1) " * (COMPLETION_IDS // 4)},
    "finish_reason": "stop",
    "logprobs": {"content": [{"token": "t", "logprob": -0.25} for _ in range(COMPLETION_IDS)]},
    "token_ids": list(range(COMPLETION_IDS)),
}
_WHOLE = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": "echo",
        "choices": [_CHOICE],
        "prompt_token_ids": list(range(PROMPT_IDS)),
    }
)
_FIRST = {key: value for key, value in _CHOICE.items() if key != "message"} | {
    "delta": _CHOICE["message"],
    "finish_reason": None,
}
_STREAM = [
    b"data: "
    + orjson.dumps({"model": "echo", "prompt_token_ids": list(range(PROMPT_IDS)), "choices": [_FIRST]})
    + b"\n\n",
    b"data: "
    + orjson.dumps({"model": "echo", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    + b"\n\n",
    b"data: [DONE]\n\n",
]


async def _events() -> AsyncIterator[bytes]:
    for event in _STREAM:
        yield event


async def chat(request: Request) -> Response:
    body = orjson.loads(await request.body())
    if LATENCY_S:
        await asyncio.sleep(LATENCY_S)
    if body.get("stream") is True:
        return StreamingResponse(_events(), media_type="text/event-stream")
    return Response(_WHOLE, media_type="application/json")


async def health(request: Request) -> Response:
    return Response(b"{}", media_type="application/json")


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])
