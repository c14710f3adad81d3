"""What the episode gateway's tests share: opening a counter episode with a gateway, the gateway's calls
of a stored record, and an error in OpenAI's shape (the gateway's routes answer in it)."""

from __future__ import annotations

from typing import Any

from conftest import AppHarness

__all__ = ["gateway_calls", "open_episode", "openai_error"]


async def open_episode(
    gym: AppHarness, upstream: str, *, task_id: str = "counter-0000", seed: int = 0, **gateway: Any
) -> dict[str, Any]:
    """A live counter episode whose gateway sends to `upstream` (`gateway`: its other fields): the 201
    body."""
    body = {"env": "counter", "task_id": task_id, "seed": seed, "gateway": {"upstream": upstream, **gateway}}
    created = await gym.client.post("/v1/sessions", json=body)
    assert created.status_code == 201, created.text
    return dict(created.json())


def gateway_calls(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns of a stored record that the gateway recorded (one a complete call)."""
    return [turn for turn in record["turns"] if turn.get("source") == "gateway"]


def openai_error(response: Any, status: int) -> dict[str, Any]:
    """The `error` object of an answer with `status`, checked to have OpenAI's fields."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    return dict(error)
