"""Turning every failure into an RFC 9457 problem+json response, in one place.

Handlers: `GymError` (every deliberate error), request validation (422 with the field paths but never
the offending input echoed back, which may be megabytes), Starlette's own HTTP errors (unknown route,
wrong method), and a catch-all that logs the traceback and sends a 500 problem without it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from gym_server.core import jsontext
from gym_server.core.errors import GymError

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "StrictJsonRoute",
    "install_error_handlers",
    "on_gym_error",
    "on_unexpected_error",
    "parse_body",
    "problem",
    "problem_body",
]

M = TypeVar("M", bound=BaseModel)

PROBLEM_MEDIA_TYPE = "application/problem+json"

log = logging.getLogger(__name__)


def problem_body(
    status: int, slug: str, title: str, detail: str, instance: str | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": f"urn:gym-server:problem:{slug}",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    body.update(extra)
    return body


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    *,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response:
    body = problem_body(status, slug, title, detail, instance, **extra)
    return Response(
        orjson.dumps(body, default=str), status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers
    )


def parse_body(raw: bytes, model: type[M]) -> M:
    """Parse and validate a JSON body; failures raise the same 422 a FastAPI body parameter would."""
    try:
        # first: pydantic reads NaN, Infinity and 1e400 (as inf), and says less about a lone surrogate
        jsontext.refuse_unstorable(raw)
        body = model.model_validate_json(raw)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_input=False)]
        raise RequestValidationError(errors) from None
    except json.JSONDecodeError as exc:
        raise RequestValidationError([_json_invalid(exc)]) from None
    return body


def _json_invalid(exc: json.JSONDecodeError) -> dict[str, Any]:
    return {"type": "json_invalid", "loc": ("body", exc.pos), "msg": exc.msg, "input": {}}


class _StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = jsontext.loads_strict(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """A FastAPI route whose JSON body parser refuses NaN and Infinity (422), as `parse_body` does.

    FastAPI reads bodies with `json.loads`, which accepts both; orjson would then store them as `null`.
    Its `JSONDecodeError` becomes FastAPI's usual 422, so the problem says what was wrong.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_json_handler(request: Request) -> Response:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict_json_handler


def gym_error_problem(exc: GymError, instance: str | None = None) -> Response:
    return problem(
        exc.status, exc.slug, exc.title, exc.detail, instance=instance, headers=exc.headers, **exc.extra
    )


async def on_gym_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GymError)
    if exc.status >= 500:
        log.error("%s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc.detail)
    return gym_error_problem(exc, request.url.path)


def _describe(error: dict[str, Any]) -> dict[str, Any]:
    location = ".".join(str(part) for part in error.get("loc", ()))
    message = str(error.get("msg", ""))
    if error.get("type") == "json_invalid":  # FastAPI's own says only "JSON decode error"
        message = str((error.get("ctx") or {}).get("error", message))
    return {"loc": location, "msg": message, "type": str(error.get("type", ""))}


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [_describe(error) for error in exc.errors()][:20]
    invalid_json = [error for error in errors if error["type"] == "json_invalid"]
    if invalid_json:
        detail = f"the request body is not valid JSON ({invalid_json[0]['msg']})"
    else:
        detail = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:5])
    return problem(
        422, "invalid-request", "Invalid request", detail, instance=request.url.path, errors=errors
    )


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else "request failed"
    if exc.status_code == 404:
        detail = f"no route {request.method} {request.url.path}; see /docs or /openapi.json"
    slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    return problem(
        exc.status_code,
        slug,
        detail.split(";")[0][:80],
        detail,
        instance=request.url.path,
        headers=dict(exc.headers or {}),
    )


async def on_unexpected_error(request: Request, exc: Exception) -> Response:
    """The catch-all: a 500 problem+json that names nothing of the error, which is logged instead."""
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem(
        500,
        "internal",
        "Internal error",
        "the server hit an unexpected error; it is logged, and no state was lost",
        instance=request.url.path,
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GymError, on_gym_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, on_unexpected_error)
