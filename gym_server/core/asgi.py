"""Raw ASGI helpers for the gym's front (`Stage`) and the fast paths that read a body before deciding
who answers the request."""

from __future__ import annotations

from typing import Protocol

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Stage", "has_json_content_type", "read_body", "replay_body", "send_json"]


class Stage(Protocol):
    """One step of the gym's front (`gym_server.api.front.Front`): a check or a fast path.

    A stage decides from the scope alone, without awaiting, whether a request is its business; most
    requests pass most stages, and then a stage costs one plain call. Work that must await (reading a
    body to count or check it) belongs in the app it returns.
    """

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        """None: the request goes on to the stages after this one as it is (the stage may have noted
        something in `scope["state"]`). Else the ASGI app that takes the request over: a refusal, a fast
        path's answer, or work of the stage's own (reading a chunked body, say) that then calls `rest`,
        the stages after this one and the app behind them."""
        ...


async def read_body(receive: Receive) -> bytes:
    """The whole request body; a client gone before its end raises `ClientDisconnect`, as in Starlette."""
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        return bytes(message.get("body", b""))  # the usual case: the body came in one message
    chunks: list[bytes] = []
    while True:
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await receive()


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands out `body` (already read) in one message, then defers to `receive`."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def has_json_content_type(scope: Scope) -> bool:
    """Whether the request says `Content-Type: application/json`, exactly (what JSON clients send)."""
    return any(name == b"content-type" and value == b"application/json" for name, value in scope["headers"])


async def send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    """Answer with a JSON `body` already encoded, and extra `headers`, straight from the ASGI messages."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
