"""A scripted, deterministic tool-calling policy behind an OpenAI-compatible chat endpoint.

Only for the tool path: the gym's tiny CPU policy is random and almost never emits a well-formed
tool call, so these tests also drive verifiers with this responder, which plays `counter` by its
rules. It speaks the wire verifiers' chat program uses (`POST /v1/chat/completions`, streamed as
server-sent events with a usage chunk); everything else in the loop (verifiers, its harness, its
interception server, the gym) is the real thing.

The script: `read`; then one `add` with a bad argument (`{"amount": "lots"}`), whose gym error must
come back as the tool result with the episode going on; then `add` steps of at most 10 towards the
target stated in the prompt; then `submit`.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

BAD_ARGUMENTS = {"amount": "lots"}


def next_call(messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The tool call the script makes after `messages`."""
    results = [str(m.get("content")) for m in messages if m["role"] == "tool"]
    if not results:
        return "read", {}
    if len(results) == 1:
        return "add", BAD_ARGUMENTS
    prompt = next(str(m["content"]) for m in messages if m["role"] == "user")
    target = int(re.search(r"-?\d+", prompt).group())  # type: ignore[union-attr]
    value = int(next(r for r in reversed(results) if re.fullmatch(r"-?\d+", r.strip())))
    if value == target:
        return "submit", {}
    return "add", {"amount": max(-10, min(10, target - value))}


def _chunk(model: str, choices: list[dict[str, Any]], **extra: Any) -> bytes:
    body = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": model}
    return f"data: {json.dumps({**body, 'choices': choices, **extra})}\n\n".encode()


async def chat(request: Request) -> StreamingResponse | JSONResponse:
    body = await request.json()
    turn = sum(m["role"] == "assistant" for m in body["messages"])
    request.app.state.before_turn(turn)
    name, arguments = next_call(body["messages"])
    call = {
        "index": 0,
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    if not body.get("stream"):
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        return JSONResponse(
            {
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [choice],
                "usage": _usage(),
            }
        )

    def events() -> Iterator[bytes]:
        model = body["model"]
        yield _chunk(
            model, [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}, "finish_reason": None}]
        )
        yield _chunk(model, [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])
        yield _chunk(model, [], usage=_usage())
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


@contextmanager
def serve_scripted_policy(before_turn: Callable[[int], None] = lambda turn: None) -> Iterator[str]:
    """The scripted policy on a loopback port for the block; yields its base URL (`.../v1`).
    `before_turn(n)` runs before the n-th assistant turn (from 0) is answered: a test's fault."""
    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    app.state.before_turn = before_turn
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
