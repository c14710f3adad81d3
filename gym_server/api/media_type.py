"""ASGI middleware that refuses write requests whose body is not declared JSON (415 problem+json).

Every body the API reads is JSON, so this costs clients nothing, and it closes a hole: a browser sends
a `text/plain`, form or multipart POST to any origin without a CORS preflight, so without this check
any web page a user visits could drive a gym listening on their localhost. A POST with neither a body
nor a Content-Type (`curl -X POST .../verify`) is still accepted; every browser form sends one.

The only exceptions are the paths named in `form_paths` (the /ui login and logout forms), which are
guarded by the auth middleware instead: same-origin checks and, for logout, the login's CSRF token.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gym_server.core.errors import UnsupportedMediaType
from gym_server.core.problems import gym_error_problem

__all__ = ["JsonBodyMiddleware", "is_json_media_type"]

_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH"})


def is_json_media_type(content_type: str) -> bool:
    """`application/json` or a `+json` type, whatever its parameters (`; charset=utf-8`)."""
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


class JsonBodyMiddleware:
    """Answers 415 to a POST, PUT or PATCH whose body is not `application/json` (but on `form_paths`)."""

    def __init__(self, app: ASGIApp, form_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.form_paths = form_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in _WRITE_METHODS
            and scope["path"] not in self.form_paths
        ):
            content_type: str | None = None
            has_body = False
            for name, value in scope["headers"]:
                if name == b"content-type":
                    content_type = value.decode("latin-1")
                elif name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
                    has_body = True
            refused = has_body if content_type is None else not is_json_media_type(content_type)
            if refused:
                await gym_error_problem(UnsupportedMediaType(content_type))(scope, receive, send)
                return
        await self.app(scope, receive, send)
