"""The few HTTP calls the Ray tests make, over loopback with the standard library."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def request(base: str, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
    """One request; returns the status, the headers (lower-case names) and the decoded JSON (or None)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"content-type": "application/json"}
    call = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(call, timeout=30) as answer:
            raw, status, got = answer.read(), answer.status, answer.headers
    except urllib.error.HTTPError as exc:
        raw, status, got = exc.read(), exc.code, exc.headers
    return status, {k.lower(): v for k, v in got.items()}, json.loads(raw) if raw else None


def get(base: str, path: str) -> tuple[int, Any]:
    status, _, body = request(base, "GET", path)
    return status, body


def tool_call(name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "message": {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments or {})},
                }
            ],
        }
    }
