"""Errors of the gateway's OpenAI routes, in the shape OpenAI clients parse: `{"error": {"message",
"type", "code"}}` (the OpenAI SDKs raise `NotFoundError`, `APIStatusError`... from the status and read
`message` from the body), not the gym's problem+json, which those clients would only show as text."""

from __future__ import annotations

from typing import Any

from gym_server.core.errors import GymError

__all__ = ["GatewayError", "openai_error_body"]


def openai_error_body(message: str, type_: str, code: str | int | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


class GatewayError(Exception):
    """A refusal of a gateway call: its HTTP status and OpenAI error fields."""

    def __init__(self, status: int, message: str, type_: str, code: str | None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type_, code

    def body(self) -> dict[str, Any]:
        return openai_error_body(self.message, self.type, self.code)

    @classmethod
    def from_gym(cls, exc: GymError) -> GatewayError:
        """A gym error met on the way (unknown episode 404, closed or expired 410, store down 503)."""
        type_ = "invalid_request_error" if exc.status < 500 else "server_error"
        return cls(exc.status, exc.detail, type_, exc.slug)

    @classmethod
    def bad_request(cls, message: str) -> GatewayError:
        return cls(400, message, "invalid_request_error", "invalid_request")

    @classmethod
    def upstream(cls, message: str, *, timeout: bool = False) -> GatewayError:
        """The policy endpoint failed (502) or was too slow (504); the episode is stored as failed."""
        if timeout:
            return cls(504, message, "upstream_error", "policy_timeout")
        return cls(502, message, "upstream_error", "policy_error")
