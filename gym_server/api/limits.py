"""ASGI middleware that refuses request bodies over the configured limit with a 413 problem.

It runs before routing, so an oversized body is never parsed. A declared Content-Length is checked
up front; a chunked body is counted as it streams and buffered only up to the limit.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.core.asgi import replay_body
from gym_server.core.errors import InvalidRequest, PayloadTooLarge
from gym_server.core.problems import gym_error_problem

__all__ = ["BodyLimitMiddleware"]


class BodyLimitMiddleware:
    """Answers 413 for bodies larger than `max_bytes`."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared < 0:
                await gym_error_problem(InvalidRequest("invalid Content-Length header"))(scope, receive, send)
            elif declared > self.max_bytes:
                await gym_error_problem(PayloadTooLarge(declared, self.max_bytes))(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        # Chunked: read it all here (bounded), then replay it to the app in one message.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await gym_error_problem(PayloadTooLarge(size, self.max_bytes))(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replay_body(b"".join(chunks), receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None
