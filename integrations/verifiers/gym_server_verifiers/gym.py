"""The gym's native HTTP API as this package uses it: sessions, steps, verify, close, task listing.

Every failure becomes a `GymError` that names the gym's URL and what it answered (its problem+json
`detail`), so a rollout against a gym that is down or that refuses shows why in the verifiers trace
instead of scoring as a silent 0. A gym that requires keys gets `api_key` as `Authorization: Bearer` on
every call; the key is in no URL and no message.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = ["GymError", "list_tasks", "request"]

TASK_PAGE = 1000  # the gym's largest page of tasks


class GymError(RuntimeError):
    """The gym could not be reached, or answered with an error status (`status`, its `detail`)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _answer(response: httpx.Response) -> Any:
    """The decoded JSON answer (None for 204), or a `GymError` carrying the gym's detail."""
    if response.is_error:
        try:
            detail = response.json().get("detail", response.text)
        except (json.JSONDecodeError, AttributeError):
            detail = response.text
        request = response.request
        raise GymError(
            f"gym answered {response.status_code} to {request.method} {request.url}: {detail}",
            response.status_code,
        )
    return None if response.status_code == 204 else response.json()


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _unreachable(method: str, url: str, exc: httpx.HTTPError) -> GymError:
    return GymError(f"gym unreachable: {method} {url}: {type(exc).__name__}: {exc}")


async def request(
    method: str,
    base_url: str,
    path: str,
    *,
    timeout_s: float,
    api_key: str | None,
    body: dict[str, Any] | None = None,
) -> Any:
    """One call of the gym's session API."""
    url = f"{base_url.rstrip('/')}{path}"
    try:
        async with httpx.AsyncClient(timeout=timeout_s, headers=_headers(api_key)) as client:
            response = await client.request(method, url, json=body)
    except httpx.HTTPError as exc:
        raise _unreachable(method, url, exc) from exc
    return _answer(response)


def list_tasks(
    base_url: str, env: str, split: str | None, *, timeout: float, api_key: str | None
) -> list[dict[str, Any]]:
    """Every public task of `env` (of `split`), page by page. Synchronous: a taskset loads its rows
    synchronously, from inside verifiers' running event loop."""
    url = f"{base_url.rstrip('/')}/v1/environments/{env}/tasks"
    tasks: list[dict[str, Any]] = []
    with httpx.Client(timeout=timeout, headers=_headers(api_key)) as client:
        while True:
            params: dict[str, Any] = {"offset": len(tasks), "limit": TASK_PAGE}
            if split is not None:
                params["split"] = split
            try:
                page = _answer(client.get(url, params=params))
            except httpx.HTTPError as exc:
                raise _unreachable("GET", url, exc) from exc
            tasks += page["tasks"]
            if not page["tasks"] or len(tasks) >= page["total"]:
                return tasks
