"""What the gym client raises: every error derives from `GymClientError`."""

from __future__ import annotations

import re
from typing import Any

import httpx

__all__ = ["GymAPIError", "GymClientError", "GymTransportError", "GymUnavailable", "problem_of"]


class GymClientError(Exception):
    """Base of every error this client raises."""


class GymTransportError(GymClientError):
    """The server could not be reached or did not answer in time (after any safe retries)."""


class GymAPIError(GymClientError):
    """The server answered with an error status; `problem` is its RFC 9457 body."""

    def __init__(self, status: int, problem: dict[str, Any], method: str, path: str) -> None:
        self.status = status
        self.problem = problem
        self.method = method
        self.path = path
        # `urn:gym-server:problem:session-finished` (or a URL ending in the slug) -> `session-finished`
        self.slug = re.split(r"[/:]", str(problem.get("type", "")))[-1]
        self.detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
        super().__init__(f"{method} {path} -> {status}: {self.detail}")


class GymUnavailable(GymAPIError):
    """429 or 503 answered on every attempt: the gym is at capacity or a backend is down."""


def problem_of(response: httpx.Response) -> dict[str, Any]:
    """The problem body of an error answer; a proxy's HTML page becomes its first 500 characters."""
    try:
        body = response.json()
    except ValueError:
        return {"detail": response.text[:500]}
    return body if isinstance(body, dict) else {"detail": str(body)[:500]}
