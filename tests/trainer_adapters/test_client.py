"""The gym client: retries only where safe, bounded, honouring Retry-After; 1,000 sessions at once.

Unit tests drive it over `httpx.MockTransport`; the capacity and concurrency tests use a real
`gym-server serve` process on loopback.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from conftest import ServerProcess
from gymtest import apoll, call, poll
from store.conftest import _outage as database_down
from store.conftest import throwaway_postgres

from gym_trainer.client import (
    GymAPIError,
    GymClient,
    GymTransportError,
    GymUnavailable,
    RetryPolicy,
    SyncGymClient,
)
from gym_trainer.client.retry import retry_after

FAST = RetryPolicy(attempts=4, backoff_s=0.001, max_backoff_s=0.01, max_retry_after_s=0.05)
CREATED = {
    "session_id": "s1",
    "env": "counter",
    "env_version": "v",
    "task_id": "counter-0000",
    "seed": 0,
    "messages": [],
    "tools": [],
    "max_turns": 32,
    "expires_at": "",
}


def mock(handler: Callable[[httpx.Request], httpx.Response]) -> GymClient:
    return GymClient("http://gym.test", retry=FAST, transport=httpx.MockTransport(handler))


async def test_429_is_retried_after_retry_after_then_succeeds() -> None:
    seen: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(time.monotonic())
        if len(seen) < 3:
            return httpx.Response(429, headers={"Retry-After": "0.02"}, json={"detail": "at capacity"})
        return httpx.Response(201, json=CREATED)

    async with mock(handler) as gym:
        session = await gym.create_session("counter", task_id="counter-0000")
    assert session.session_id == "s1"
    assert len(seen) == 3
    assert gym.retries == 2
    assert seen[1] - seen[0] >= 0.015  # waited for Retry-After (capped at 0.05 by the policy)


async def test_retries_are_bounded_and_raise_unavailable() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(503, json={"type": "about:blank/unavailable", "detail": "db down"})

    async with mock(handler) as gym:
        with pytest.raises(GymUnavailable) as info:
            await gym.list_environments()
    assert calls == FAST.attempts
    assert info.value.status == 503
    assert info.value.detail == "db down"


async def test_other_errors_are_not_retried() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(409, json={"type": "https://gym/problems/session-finished", "detail": "done"})

    async with mock(handler) as gym:
        with pytest.raises(GymAPIError) as info:
            await gym.step("s1", {"role": "assistant", "content": "x"})
    assert calls == 1
    assert info.value.slug == "session-finished"
    assert not isinstance(info.value, GymUnavailable)


async def test_connect_errors_are_retried_but_a_step_that_may_have_landed_is_not() -> None:
    attempts: dict[str, int] = {"connect": 0, "read": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/verify"):
            attempts["connect"] += 1
            if attempts["connect"] < 3:
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(200, json={"reward": 1.0, "components": {"a": 1}})
        attempts["read"] += 1
        raise httpx.ReadTimeout("slow", request=request)

    async with mock(handler) as gym:
        score = await gym.verify("s1")
        assert score.reward == 1.0 and score.components == {"a": 1.0}
        with pytest.raises(GymTransportError):
            await gym.step("s1", {"role": "assistant", "content": "x"})
    assert attempts == {"connect": 3, "read": 1}


async def test_idempotent_calls_survive_a_dropped_connection() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.RemoteProtocolError("dropped", request=request)
        return httpx.Response(204)

    async with mock(handler) as gym:
        await gym.close("s1")
    assert calls == 2


async def test_sessions_stay_on_the_replica_that_created_them() -> None:
    hosts: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append((request.url.host, request.url.path))
        if request.method == "POST" and request.url.path == "/v1/sessions":
            return httpx.Response(201, json={**CREATED, "session_id": f"id-{request.url.host}"})
        return httpx.Response(200, json={"messages": [], "done": False, "reward": None, "info": {}})

    gym = GymClient(["http://a", "http://b"], retry=FAST, transport=httpx.MockTransport(handler))
    async with gym:
        first = await gym.create_session("counter", task_id="t")
        second = await gym.create_session("counter", task_id="t")
        await gym.step(second.session_id, {"role": "assistant", "content": "x"})
        await gym.step(first.session_id, {"role": "assistant", "content": "x"})
    assert [h for h, _ in hosts] == ["a", "b", "b", "a"]


async def test_forks_stay_on_their_episode_s_replica_and_refusals_are_api_errors() -> None:
    hosts: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append((request.url.host, request.url.path))
        path = request.url.path
        if path == "/v1/sessions":
            return httpx.Response(201, json={**CREATED, "session_id": f"id-{request.url.host}"})
        if path.endswith("/fork"):
            body = orjson.loads(request.content)
            if body["turn"] > 1:
                problem = {"type": "urn:gym-server:problem:invalid-request", "title": "Invalid request"}
                return httpx.Response(422, json={**problem, "status": 422, "detail": "turn 2 is beyond"})
            forks = [
                {**CREATED, "session_id": f"fork-{i}", "parent_id": "id-b", "parent_turn": 1}
                for i in range(2)
            ]
            return httpx.Response(
                201, json={"parent_id": "id-b", "turn": 1, "fork_mode": "copy", "forks": forks}
            )
        return httpx.Response(200, json={"messages": [], "done": False, "reward": None, "info": {}})

    gym = GymClient(["http://a", "http://b"], retry=FAST, transport=httpx.MockTransport(handler))
    async with gym:
        await gym.create_session("counter", task_id="t")
        second = await gym.create_session("counter", task_id="t")
        forked = await gym.fork(second.session_id, 1, 2)
        assert (forked.parent_id, forked.turn, forked.fork_mode) == ("id-b", 1, "copy")
        assert [(f.session_id, f.parent_id, f.parent_turn) for f in forked.forks] == [
            ("fork-0", "id-b", 1),
            ("fork-1", "id-b", 1),
        ]
        await gym.step("fork-1", {"role": "assistant", "content": "x"})
        with pytest.raises(GymAPIError) as refused:
            await gym.fork(second.session_id, 2)
    assert refused.value.status == 422 and "beyond" in str(refused.value)
    assert [h for h, _ in hosts] == ["a", "b", "b", "b", "b"]  # the forks and their steps: b, like it
    assert sum(path.endswith("/fork") for _, path in hosts) == 2  # a refusal is not retried


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after(httpx.Response(429, headers={"Retry-After": "3"})) == 3.0
    assert retry_after(httpx.Response(429)) is None
    assert retry_after(httpx.Response(429, headers={"Retry-After": "soon"})) is None
    past = retry_after(httpx.Response(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}))
    assert past == 0.0


def test_backoff_is_capped() -> None:
    policy = RetryPolicy(backoff_s=1.0, max_backoff_s=2.0, max_retry_after_s=5.0)
    assert all(policy.delay(attempt, None) <= 2.0 for attempt in range(20))
    assert policy.delay(0, 3600.0) == 5.0
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(attempts=0)


# -- against a real server process -----------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gym.db'}"


@pytest.mark.slow
@pytest.mark.heavy
async def test_a_thousand_concurrent_sessions(
    server_factory: Callable[..., ServerProcess], sqlite_url: str
) -> None:
    server = server_factory(sqlite_url, GYM_SESSIONS__MAX_SESSIONS="1200", GYM_LOG_LEVEL="warning")
    server.start()
    n = 1000
    async with GymClient(server.url, max_connections=64) as gym:
        # All 1,000 open at once: created concurrently, each stepped, then all closed.
        sessions = await asyncio.wait_for(
            asyncio.gather(
                *(
                    gym.create_session("counter", task_id=f"counter-{i % 50:04d}", seed=i, run="load")
                    for i in range(n)
                )
            ),
            timeout=180,
        )
        assert len({s.session_id for s in sessions}) == n
        replies = await asyncio.wait_for(
            asyncio.gather(*(gym.step(s.session_id, call("read")) for s in sessions)), timeout=180
        )
        assert all(reply.messages[0]["role"] == "tool" for reply in replies)
        assert (await gym.request("GET", "/readyz")).json()["live_sessions"] == n
        await asyncio.wait_for(asyncio.gather(*(gym.close(s.session_id) for s in sessions)), timeout=180)
        assert (await gym.request("GET", "/readyz")).json()["live_sessions"] == 0


@pytest.mark.slow
async def test_capacity_429_waits_for_a_free_slot(
    server_factory: Callable[..., ServerProcess], sqlite_url: str
) -> None:
    server = server_factory(
        sqlite_url, GYM_SESSIONS__MAX_SESSIONS="3", GYM_SESSIONS__RETRY_AFTER_S="1", GYM_LOG_LEVEL="warning"
    )
    server.start()
    patient = RetryPolicy(attempts=50, backoff_s=0.05, max_retry_after_s=0.2)  # ~10 s of retries
    async with GymClient(server.url, retry=patient) as gym:
        held = [await gym.create_session("counter", task_id="counter-0000") for _ in range(3)]
        waiting = asyncio.create_task(gym.create_session("counter", task_id="counter-0001"))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # refused with 429, retrying
        await gym.close(held[0].session_id)
        late = await asyncio.wait_for(waiting, timeout=10)
        assert late.task_id == "counter-0001"
        assert gym.retries >= 1

    impatient = RetryPolicy(attempts=2, backoff_s=0.01, max_retry_after_s=0.01)
    async with GymClient(server.url, retry=impatient) as gym:
        with pytest.raises(GymUnavailable) as info:
            await gym.create_session("counter", task_id="counter-0000")
    assert info.value.status == 429


@pytest.mark.slow
def test_sync_client_plays_an_episode(server_factory: Callable[..., ServerProcess], sqlite_url: str) -> None:
    server = server_factory(sqlite_url, GYM_LOG_LEVEL="warning")
    server.start()
    with SyncGymClient(server.url) as gym:
        names = [env.name for env in gym.list_environments()]
        assert "counter" in names
        page = gym.tasks("counter", split="validation", limit=2)
        assert len(page["tasks"]) == 2 and "answer" not in page["tasks"][0]
        session = gym.create_session("counter", task_id="counter-0000", seed=0, run="sync")
        reply = gym.step(session.session_id, call("read"), turn_data={"completion_ids": [1, 2]})
        assert reply.messages[0]["role"] == "tool"
        finished = gym.step(session.session_id, call("submit"))
        assert finished.done and finished.reward is not None
        gym.close(session.session_id)
        gym.close(session.session_id)  # idempotent
        stored = poll(lambda: gym.get_rollout(session.session_id), lambda row: row["status"] != "live")
        assert stored["turns"] == [{"completion_ids": [1, 2]}]
        cut = gym.create_session("counter", task_id="counter-0001", run="sync")
        recorded = gym.record_truncated_turn(cut.session_id, "half a", {"completion_ids": [3]})
        assert recorded == {"turns": 1, "failure": None}
        gym.close(cut.session_id)
        row = poll(lambda: gym.get_rollout(cut.session_id), lambda row: row["status"] != "live")
        assert row["turns"] == [{"completion_ids": [3], "content": "half a", "truncated": True}]
        score = gym.verify_stateless("math", task_id="math-00000", completion="\\boxed{0}")
        assert 0.0 <= score.reward <= 1.0


# -- a dropped connection: resent only when the server provably never read the request ---------------


class OneShotServer:
    """A raw TCP server on loopback whose first connection misbehaves, then answers like the gym.

    `unread`: the first connection is closed with the request still unread in its socket buffer, so the
    kernel resets it (what uvicorn does when its keep-alive timer fires before it reads a request).
    Otherwise the first connection reads the whole request, then closes without answering (a server
    that died mid-request: the request may have been applied). Blocking sockets in a thread, because an
    asyncio server would read the request into its own buffer before the test could leave it unread.
    """

    def __init__(self, unread: bool) -> None:
        self.unread = unread
        self.requests_read = 0
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self.thread.join(timeout=10)
        self.listener.close()

    def _read_request(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += conn.recv(65536)
        self.requests_read += 1

    def _serve(self) -> None:
        for attempt in range(2):
            conn, _ = self.listener.accept()
            self.connections += 1
            with conn:
                if attempt == 0 and self.unread:
                    # Wait until the request is in the socket, then close without reading it: the kernel
                    # answers with a reset, the signal that the server never saw the request.
                    conn.settimeout(10)
                    conn.recv(1, socket.MSG_PEEK)
                    continue
                self._read_request(conn)
                if attempt == 0:
                    return  # closed after reading: a client must not send it again
                body = orjson.dumps(CREATED)
                head = f"HTTP/1.1 201 Created\r\ncontent-length: {len(body)}\r\n"
                conn.sendall(head.encode() + b"content-type: application/json\r\n\r\n" + body)


async def test_a_request_reset_unread_is_resent_even_when_not_idempotent() -> None:
    shot = OneShotServer(unread=True)
    with shot as url:
        async with GymClient(url, retry=FAST) as gym:
            session = await gym.create_session("counter", task_id="counter-0000")
    assert session.session_id == "s1"
    assert (shot.connections, shot.requests_read, gym.retries) == (2, 1, 1)


async def test_a_request_the_server_read_is_not_resent_when_not_idempotent() -> None:
    shot = OneShotServer(unread=False)
    with shot as url:
        async with GymClient(url, retry=FAST) as gym:
            with pytest.raises(GymTransportError):
                await gym.create_session("counter", task_id="counter-0000")
    assert (shot.connections, shot.requests_read, gym.retries) == (1, 1, 0)


@pytest.mark.slow
async def test_a_stalled_server_drops_requests_unread_and_the_client_resends_them(
    server_factory: Callable[..., ServerProcess], sqlite_url: str
) -> None:
    """A server stopped past its 5 s keep-alive closes its idle connections on waking, before it reads
    the requests already waiting in them; each was never applied, so each is sent again, once."""
    server = server_factory(sqlite_url, GYM_LOG_LEVEL="warning")
    server.start()
    assert server.process is not None
    n = 16
    async with GymClient(server.url, max_connections=n) as gym:
        await asyncio.gather(*(gym.request("GET", "/readyz") for _ in range(n)))  # n kept-alive sockets
        server.process.send_signal(signal.SIGSTOP)
        try:
            pending = [
                asyncio.create_task(gym.create_session("counter", task_id="counter-0000", seed=i))
                for i in range(n)
            ]
            await asyncio.sleep(6.5)
        finally:
            server.process.send_signal(signal.SIGCONT)
        sessions = await asyncio.wait_for(asyncio.gather(*pending), timeout=60)
        assert len({s.session_id for s in sessions}) == n
        assert (await gym.request("GET", "/readyz")).json()["live_sessions"] == n  # none created twice


@pytest.fixture
def private_postgres() -> Iterator[str]:
    with throwaway_postgres() as url:
        yield url


@pytest.mark.slow
@pytest.mark.postgres
async def test_a_503_from_a_real_database_outage_honours_retry_after_and_is_bounded(
    server_factory: Callable[..., ServerProcess], private_postgres: str
) -> None:
    server = server_factory(private_postgres, GYM_LOG_LEVEL="warning")
    server.start()
    cap = 0.4  # the gym asks for 5 s; the policy caps it, and the backoff alone would be milliseconds
    impatient = RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002, max_retry_after_s=cap)
    async with GymClient(server.url, retry=impatient) as gym:
        session = await gym.create_session("counter", task_id="counter-0000", run="outage")
        await gym.close(session.session_id)
        # Listing reads the database itself, once the writer has flushed the row.
        await apoll(lambda: gym.list_rollouts(run="outage"), lambda page: page["total"] == 1)
        before = gym.retries
        with database_down(private_postgres):
            started = time.monotonic()
            with pytest.raises(GymUnavailable) as info:
                await gym.list_rollouts(run="outage")
            elapsed = time.monotonic() - started
        assert info.value.status == 503
        assert gym.retries - before == impatient.attempts - 1
        assert elapsed >= (impatient.attempts - 1) * cap

    patient = RetryPolicy(attempts=20, backoff_s=0.001, max_backoff_s=0.002, max_retry_after_s=0.2)
    async with GymClient(server.url, retry=patient) as gym:
        with database_down(private_postgres):
            waiting = asyncio.create_task(gym.list_rollouts(run="outage"))
            await asyncio.sleep(0.5)
            assert not waiting.done()  # answered 503, waiting to ask again
        page = await asyncio.wait_for(waiting, timeout=30)  # the database is back: the retry succeeds
        assert page["items"][0]["id"] == session.session_id and gym.retries >= 2


async def test_a_session_named_by_the_entry_point_steps_its_replica_directly_and_falls_back() -> None:
    """`serve --ray`: the create's `x-gym-replica-url` takes steps to the replica itself; a replica that
    cannot be reached sends the step back through the entry point (which answers for a dead replica);
    the close always goes through the entry point, so it forgets the session."""
    hosts: list[tuple[str, str, str]] = []
    replica_up = True

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append((request.method, request.url.host, request.url.path))
        if request.url.host == "replica.test" and not replica_up:
            raise httpx.ConnectError("connection refused", request=request)
        if request.method == "POST" and request.url.path == "/v1/sessions":
            return httpx.Response(201, json=CREATED, headers={"x-gym-replica-url": "http://replica.test/"})
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json={"messages": [], "done": False})

    async with mock(handler) as client:
        session = await client.create_session("counter")
        await client.step(session.session_id, {"role": "assistant", "content": "a"})
        replica_up = False
        await client.step(session.session_id, {"role": "assistant", "content": "b"})
        await client.close(session.session_id)
    assert hosts == [
        ("POST", "gym.test", "/v1/sessions"),
        ("POST", "replica.test", "/v1/sessions/s1/step"),
        ("POST", "replica.test", "/v1/sessions/s1/step"),
        ("POST", "gym.test", "/v1/sessions/s1/step"),
        ("DELETE", "gym.test", "/v1/sessions/s1"),
    ]
    assert client.retries == 0
