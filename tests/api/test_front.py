"""The gym's middleware in front of FastAPI (`gym_server.api.front`): a bug is still a 500 problem+json,
whether a fast path or a FastAPI route hits it, and is still raised to the server, which logs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from conftest import AppHarness

from gym_server.api.front import GymApp

_STEP = {"message": {"role": "assistant", "content": "hello"}}


async def _raise_bug(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a bug")


def _raise_bug_now(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a bug")


def _lenient(harness: AppHarness) -> httpx.AsyncClient:
    """A client that gets the answer the server sent before the exception reached it."""
    transport = httpx.ASGITransport(app=harness.app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://localhost")


def _assert_internal_problem(answer: httpx.Response, path: str) -> None:
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["type"] == "urn:gym-server:problem:internal"
    assert body["instance"] == path
    assert "a bug" not in answer.text  # the traceback and message stay in the log


async def test_the_app_serves_through_its_front(gym: AppHarness) -> None:
    assert isinstance(gym.app, GymApp)
    assert gym.app.front is not None
    assert gym.app.user_middleware == []  # moved in front: FastAPI's own stack holds none of them


@pytest.mark.parametrize(
    ("method", "path_of", "patched", "bug"),
    [
        # answered by SessionFastPath, in front of FastAPI
        ("POST", lambda sid: f"/v1/sessions/{sid}/step", "step", _raise_bug),
        # answered by FastAPI's route, behind the front
        ("GET", lambda sid: f"/v1/sessions/{sid}", "get", _raise_bug_now),
    ],
)
async def test_a_bug_is_a_500_problem_and_reaches_the_server(
    gym: AppHarness,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    path_of: Callable[[str], str],
    patched: str,
    bug: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    created = await gym.client.post("/v1/sessions", json={"env": "counter", "task_id": "counter-0001"})
    path = path_of(created.json()["session_id"])
    manager = gym.app.state.manager
    monkeypatch.setattr(manager, patched, bug)
    body = _STEP if method == "POST" else None
    async with _lenient(gym) as client:
        answer = await client.request(method, path, json=body)
    _assert_internal_problem(answer, path)
    assert "unhandled error on" in caplog.text
    with pytest.raises(RuntimeError, match="a bug"):  # the server sees it too, as before
        await gym.client.request(method, path, json=body)
