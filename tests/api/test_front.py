"""The gym's front (`gym_server.api.front`): its stages in order, the first that takes a request
answers it; every request in the in-flight table while served; a bug is still a 500 problem+json,
whether a fast path or a FastAPI route hits it, and is still raised to the server, which logs it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from conftest import AppHarness
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gym_server.api.front import Front, GymApp
from gym_server.core.looplag import LoopLagMonitor

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
    assert gym.app.user_middleware == []  # the checks are stages of the front, not FastAPI middleware


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


# -- the front's stages, on a small app of their own ----------------------------------------------------


class _Stage:
    """Records the paths it is asked about; takes those under `prefix` with `answer`, or hands them on."""

    def __init__(self, name: str, prefix: str, hand_on: bool = False) -> None:
        self.name, self.prefix, self.hand_on = name, prefix, hand_on
        self.asked: list[str] = []

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        self.asked.append(scope["path"])
        if not scope["path"].startswith(self.prefix):
            return None
        if self.hand_on:

            async def note_and_hand_on(scope: Scope, receive: Receive, send: Send) -> None:
                scope.setdefault("state", {})["seen_by"] = self.name
                await rest(scope, receive, send)

            return note_and_hand_on
        return PlainTextResponse(f"answered by {self.name}")


async def _behind(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"the app, after {request.scope.get('state', {}).get('seen_by')}")


def _client(app: ASGIApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_the_first_stage_that_takes_a_request_answers_it_and_later_stages_never_see_it() -> None:
    first, second = _Stage("first", "/a"), _Stage("second", "/b")
    app = Starlette(routes=[Route("/{path:path}", _behind)])
    async with _client(Front([first, second], app)) as client:
        assert (await client.get("/a")).text == "answered by first"
        assert (await client.get("/b")).text == "answered by second"
        assert (await client.get("/c")).text == "the app, after None"  # no stage took it
    assert first.asked == ["/a", "/b", "/c"]
    assert second.asked == ["/b", "/c"]


async def test_a_stage_hands_a_request_on_to_the_stages_after_it_then_the_app() -> None:
    noting, answering = _Stage("noting", "/", hand_on=True), _Stage("answering", "/x")
    app = Starlette(routes=[Route("/{path:path}", _behind)])
    async with _client(Front([noting, answering], app)) as client:
        assert (await client.get("/x")).text == "answered by answering"
        assert (await client.get("/y")).text == "the app, after noting"
    assert noting.asked == ["/x", "/y"]
    assert answering.asked == ["/x", "/y"]


async def test_every_request_is_in_flight_while_served_refused_ones_too() -> None:
    monitor = LoopLagMonitor()
    seen: list[list[str]] = []

    async def look(request: Request) -> PlainTextResponse:
        seen.append([what for what, _started in monitor._in_flight.values()])
        return PlainTextResponse("ok")

    class Refusing:
        def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
            if scope["path"] != "/refused":
                return None

            async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
                seen.append([what for what, _started in monitor._in_flight.values()])
                await PlainTextResponse("no", status_code=403)(scope, receive, send)

            return refuse

    app = Starlette(routes=[Route("/{path:path}", look, methods=["GET", "POST"])])
    async with _client(Front([Refusing()], app, monitor)) as client:
        assert (await client.get("/served")).status_code == 200
        assert (await client.post("/refused")).status_code == 403
    assert seen == [["GET /served"], ["POST /refused"]]
    assert monitor._in_flight == {}  # each left the table when it ended


async def test_lifespan_goes_straight_to_the_app() -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("started")
        yield
        events.append("stopped")

    stage = _Stage("never", "/")
    front = Front([stage], Starlette(lifespan=lifespan))
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        sent.append(message["type"])

    await front({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    assert events == ["started", "stopped"]
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert stage.asked == []


class _FailingAfter:
    """Takes every request; answers `started_with` (or nothing) and then raises."""

    def __init__(self, started_with: int | None) -> None:
        self.started_with = started_with

    def take(self, scope: Scope, rest: ASGIApp) -> ASGIApp | None:
        async def fail(scope: Scope, receive: Receive, send: Send) -> None:
            if self.started_with is not None:
                await send({"type": "http.response.start", "status": self.started_with, "headers": []})
            raise RuntimeError("a bug")

        return fail


async def test_a_failure_before_the_answer_gets_the_handlers_500_after_it_keeps_the_answer() -> None:
    answered: list[str] = []

    async def on_error(request: Request, exc: Exception) -> PlainTextResponse:
        answered.append(f"{request.url.path}: {exc}")
        return PlainTextResponse("internal", status_code=500)

    for started_with, expected in ((None, 500), (202, 202)):
        front = Front([_FailingAfter(started_with)], Starlette(), on_error=on_error)
        transport = httpx.ASGITransport(app=front, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert (await client.get("/x")).status_code == expected
        async with _client(front) as client:
            with pytest.raises(RuntimeError, match="a bug"):  # the server sees it too
                await client.get("/x")
    assert answered == ["/x: a bug"] * 4


async def test_without_an_error_handler_a_failure_goes_to_the_server_as_it_is() -> None:
    async with _client(Front([_FailingAfter(None)], Starlette())) as client:
        with pytest.raises(RuntimeError, match="a bug"):
            await client.get("/x")
