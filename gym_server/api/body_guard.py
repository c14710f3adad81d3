"""The front's stage for request bodies: a body the API reads must be declared JSON (415) and fit the
configured limit (413), both problem+json (the OpenAI shape on the episode gateway's OpenAI routes: the
app's `refuse`), decided before anything parses it.

Why JSON only: every body the API reads is JSON, so this costs clients nothing, and it closes a hole: a
browser sends a `text/plain`, form or multipart POST to any origin without a CORS preflight, so without
this check any web page a user visits could drive a gym listening on their localhost. A POST with
neither a body nor a Content-Type (`curl -X POST .../verify`) is still accepted; every browser form
sends one. The only exceptions are the paths named in `form_paths` (the /ui login and logout forms),
which the auth gate guards instead: same-origin checks and, for logout, the login's CSRF token.

Why here: an oversized body is never parsed. A declared Content-Length is checked up front; a chunked
body is counted as it streams and buffered only up to the limit. Both checks read the headers in one
pass: on the hot path this stage costs one call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.core.asgi import replay_body
from gym_server.core.errors import GymError, InvalidRequest, PayloadTooLarge, UnsupportedMediaType
from gym_server.core.problems import gym_error_problem

__all__ = ["BodyGuard", "Refusal", "is_json_media_type"]

# The answer to a refused request: problem+json, unless the path's routes speak another error shape
# (the episode gateway's OpenAI routes answer in OpenAI's, which OpenAI clients parse).
Refusal = Callable[[Scope, GymError], ASGIApp]


def _problem(scope: Scope, exc: GymError) -> ASGIApp:
    return gym_error_problem(exc)


_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH"})
_BODILESS_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


def is_json_media_type(content_type: str) -> bool:
    """`application/json` or a `+json` type, whatever its parameters (`; charset=utf-8`)."""
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


class BodyGuard:
    """A stage of the gym's front (`core.asgi.Stage`): 415 for a POST, PUT or PATCH whose body is not
    `application/json` (but on `form_paths`), 413 for a body larger than `max_bytes`."""

    def __init__(
        self, max_bytes: int, form_paths: frozenset[str] = frozenset(), refuse: Refusal = _problem
    ) -> None:
        self.max_bytes = max_bytes
        self.form_paths = form_paths
        self.refuse = refuse

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        """None for a request without a body, or with a JSON one of a declared length within the limit;
        else the app that refuses it, or (no length declared) that reads the body, counting, before it
        hands it on to `rest`."""
        if scope["type"] != "http":
            return None
        method = scope["method"]
        if method in _BODILESS_METHODS:
            return None
        # One pass, in C (the HTTP parser refuses a request with two lengths, so the last one is the one).
        headers = dict(scope["headers"])
        content_type = headers.get(b"content-type")
        length = headers.get(b"content-length")
        if (
            content_type != b"application/json"  # what JSON clients send: nothing more to look at
            and method in _WRITE_METHODS
            and scope["path"] not in self.form_paths
        ):
            has_body = b"transfer-encoding" in headers or (length is not None and length.strip() != b"0")
            declared = None if content_type is None else content_type.decode("latin-1")
            if has_body if declared is None else not is_json_media_type(declared):
                return self.refuse(scope, UnsupportedMediaType(declared))
        if length is None:
            return partial(self._read_counting, rest=rest)
        try:
            size = int(length)
        except ValueError:
            size = -1
        if size < 0:
            return self.refuse(scope, InvalidRequest("invalid Content-Length header"))
        if size > self.max_bytes:
            return self.refuse(scope, PayloadTooLarge(size, self.max_bytes))
        return None

    async def _read_counting(self, scope: Scope, receive: Receive, send: Send, *, rest: ASGIApp) -> None:
        """No length declared (chunked): read it all here (bounded), then replay it to `rest` in one
        message."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self.refuse(scope, PayloadTooLarge(size, self.max_bytes))(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await rest(scope, replay_body(b"".join(chunks), receive), send)
