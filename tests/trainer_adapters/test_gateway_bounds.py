"""The episode gateway does not trust its upstream (issue 37): against scripted upstreams on loopback
that answer too much, too slowly, in shapes that are not OpenAI's, with interim heads or with the key
echoed, each call is refused the way docs/gateway.md says, the episode is stored with its failure class,
and nothing oversized is recorded. Also: what the gateway keeps per episode goes at the close, URLs that
parsers read differently are refused at creation, the front's body refusals on the OpenAI routes are in
OpenAI's shape, and a call's samples are there right after the call."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import AppHarness, serving
from gateway_helpers import gateway_calls, open_episode, openai_error
from hypothesis import given, settings
from hypothesis import strategies as st

from gym_server.gateway.record import StreamAssembler
from gym_server.gateway.service import Gateways

Script = Callable[[asyncio.StreamWriter], Awaitable[None]]
BUDGET = 64 * 1024
KEY = "sk-upstream-secret-1234"
PROMPT_IDS = [1, 2, 3]


def answer(content: str = "the counter is done") -> bytes:
    """A whole token-exact chat answer."""
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
        "token_ids": [7],
        "logprobs": {"content": [{"token": "t", "logprob": -0.5}]},
    }
    return orjson.dumps({"id": "c", "model": "m", "prompt_token_ids": PROMPT_IDS, "choices": [choice]})


def event(content: str = "x", finish: str | None = None, **choice: Any) -> bytes:
    """One streamed chunk of one token."""
    chunk = {
        "model": "m",
        "prompt_token_ids": PROMPT_IDS,
        "choices": [
            {
                "index": 0,
                "delta": {"content": content},
                "token_ids": [7],
                "logprobs": {"content": [{"token": "t", "logprob": -0.5}]},
                "finish_reason": finish,
                **choice,
            }
        ],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def head(status: int = 200, **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status} X\r\n"] + [f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items()]
    return ("".join(lines) + "\r\n").encode()


def whole(body: bytes, status: int = 200) -> bytes:
    return head(status, Content_Type="application/json", Content_Length=str(len(body))) + body


SSE = head(200, Content_Type="text/event-stream", Connection="close")


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[str]:
    """An upstream on loopback that reads each request, then answers it with `script` and closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in request.lower().split(b"\r\n")
                if line.startswith(b"content-length")
            )
            await reader.readexactly(length)
            await script(writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        server.close()


def sends(*parts: bytes) -> Script:
    async def script(writer: asyncio.StreamWriter) -> None:
        for part in parts:
            writer.write(part)
            await writer.drain()

    return script


@pytest.fixture
async def gym(tmp_path: Path) -> AsyncIterator[AppHarness]:
    async with serving(
        tmp_path,
        gateway={"upstream_timeout_s": 2.0, "call_deadline_s": 1.0},
        limits={"max_transcript_bytes": BUDGET},
    ) as harness:
        yield harness


async def chat(gym: AppHarness, episode: dict[str, Any], **extra: Any) -> Any:
    body = {"messages": [{"role": "user", "content": "hi"}], **extra}
    return await gym.client.post(f"{episode['gateway']['base_url']}/chat/completions", json=body)


async def stored(gym: AppHarness, episode: dict[str, Any]) -> tuple[str, str | None, int, bytes]:
    """The stored row's status, failure, number of recorded gateway calls and JSON."""
    row = await gym.client.get(f"/v1/rollouts/{episode['session_id']}")
    record = row.json()
    return record["status"], record["failure"], len(gateway_calls(record)), row.content


def last_event(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
    return dict(orjson.loads(data[-1]))


# 1. The transcript budget bounds what is read and what is recorded


BIG = answer("x" * (4 * BUDGET))
WHOLE_OVER_BUDGET = {
    "with its length": sends(whole(BIG)),
    "delimited by the close": sends(head(200, Content_Type="application/json", Connection="close"), BIG),
    # A length announced and never sent: refused on the head, before any of it is waited for.
    "announcing 300 MB": sends(head(200, Content_Type="application/json", Content_Length=str(300 << 20))),
}


@pytest.mark.parametrize("script", WHOLE_OVER_BUDGET.values(), ids=WHOLE_OVER_BUDGET.keys())
async def test_a_whole_answer_over_the_budget_is_refused_and_not_recorded(
    gym: AppHarness, script: Script
) -> None:
    async with scripted(script) as url:
        episode = await open_episode(gym, url)
        error = openai_error(await chat(gym, episode), 413)
    assert error["code"] == "max_transcript_bytes" and "transcript budget" in error["message"]
    status, failure, calls, row = await stored(gym, episode)
    assert (status, failure, calls) == ("failed", "max_transcript_bytes", 0)
    assert len(row) < BUDGET


STREAM_OVER_BUDGET = {
    "many events": sends(
        SSE, *[event("y" * 200)] * (BUDGET // 100), event("", finish="stop"), b"data: [DONE]\n\n"
    ),
    "one event without its end": sends(SSE, b"data: " + b"z" * (4 * BUDGET)),
}


@pytest.mark.parametrize("script", STREAM_OVER_BUDGET.values(), ids=STREAM_OVER_BUDGET.keys())
async def test_a_stream_over_the_budget_ends_in_an_error_event_and_is_not_recorded(
    gym: AppHarness, script: Script
) -> None:
    async with scripted(script) as url:
        episode = await open_episode(gym, url)
        streamed = await chat(gym, episode, stream=True)
    assert last_event(streamed)["error"]["code"] == "max_transcript_bytes"
    assert len(streamed.content) < 2 * BUDGET  # the reading stopped at the budget
    status, failure, calls, row = await stored(gym, episode)
    assert (status, failure, calls) == ("failed", "max_transcript_bytes", 0)
    assert len(row) < BUDGET


# 2. What the gateway keeps per episode goes at the close


async def test_closed_episodes_leave_no_gateway_state(gym: AppHarness) -> None:
    gateways: Gateways = gym.app.state.gateways
    async with scripted(sends(whole(answer()))) as url:
        episodes = [await open_episode(gym, url) for _ in range(3)]
        for episode in episodes:
            assert (await chat(gym, episode)).status_code == 200
    assert repr(gateways) == "Gateways(open=3)"
    for episode in episodes:
        assert (await gym.client.delete(f"/v1/sessions/{episode['session_id']}")).status_code == 204
    assert repr(gateways) == "Gateways(open=0)"


async def test_nothing_holds_a_closed_episode(gym: AppHarness) -> None:
    """The live session of a closed episode that made gateway calls is collected: no table of the
    manager's, the gateway's or the store's keeps it (what stays is its tombstone: id, when, how, tenant)."""
    manager = gym.app.state.manager
    async with scripted(sends(whole(answer()))) as url:
        episode = await open_episode(gym, url)
        assert (await chat(gym, episode)).status_code == 200
    held = weakref.ref(manager.get(episode["session_id"]))
    assert (await gym.client.delete(f"/v1/sessions/{episode['session_id']}")).status_code == 204
    await asyncio.sleep(0)  # the environment's close, if it was left to a task
    gc.collect()
    assert held() is None, gc.get_referrers(held())


# 3. Stream assembly costs in proportion to the stream; an event is bounded


def assembly_cpu_s(events: int) -> float:
    """CPU seconds to assemble a stream of `events` one-token events, each fed as it would arrive."""
    assembler, one = StreamAssembler(budget=1 << 30), event()
    started = time.process_time()
    for _ in range(events):
        assembler.feed(one)
    spent = time.process_time() - started
    assert assembler.completion_ids is not None and len(assembler.completion_ids) == events
    return spent


def test_stream_assembly_is_linear_in_the_events() -> None:
    small, large = assembly_cpu_s(8000), assembly_cpu_s(32000)
    assert large < 8 * small  # 4 x the events: 4 x the CPU when linear (it was 20 x: quadratic)


def test_an_event_larger_than_the_budget_is_refused_as_it_comes() -> None:
    assembler = StreamAssembler(budget=1 << 20)
    piece = b"data: " + b"z" * (64 * 1024)
    fed = 0
    while assembler.error is None:
        assembler.feed(piece)
        fed += len(piece)
    assert assembler.over_budget and fed <= (1 << 20) + len(piece)
    assert "an event" in assembler.error


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def either(good: Any) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(good), JSON)


CHUNKS = st.fixed_dictionaries(
    {
        "model": either("m"),
        "prompt_token_ids": either(PROMPT_IDS),
        "choices": either(None)
        | st.lists(
            st.fixed_dictionaries(
                {
                    "index": either(0),
                    "token_ids": either([7]),
                    "logprobs": either({"content": [{"logprob": -0.5}]}),
                    "finish_reason": either("stop"),
                    "delta": either(None)
                    | st.fixed_dictionaries(
                        {
                            "role": either("assistant"),
                            "content": either("x"),
                            "tool_calls": either(None)
                            | st.lists(
                                st.fixed_dictionaries(
                                    {
                                        "index": either(0),
                                        "id": either("call-1"),
                                        "function": either(None)
                                        | st.fixed_dictionaries(
                                            {"name": either("f"), "arguments": either("{}")}
                                        ),
                                    }
                                ),
                                max_size=2,
                            ),
                        }
                    ),
                }
            ),
            max_size=2,
        ),
    }
)


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(CHUNKS | JSON, min_size=1, max_size=3))
def test_no_chunk_shape_makes_the_assembler_raise(chunks: list[Any]) -> None:
    assembler = StreamAssembler(budget=1 << 20)
    for chunk in chunks:
        assembler.feed(b"data: " + orjson.dumps(chunk) + b"\n\n")  # never raises
    if assembler.error is None:
        assembler.result()


# 4. A chunk that is not OpenAI's shape is an error event and a stored failure, never a crash


MALFORMED = {
    "tool call index a string": {"delta": {"tool_calls": [{"index": "a", "function": {"name": "f"}}]}},
    "tool call index null": {"delta": {"tool_calls": [{"index": None, "function": {"name": "f"}}]}},
    "function a string": {"delta": {"tool_calls": [{"index": 0, "function": "f"}]}},
    "name an int": {"delta": {"tool_calls": [{"index": 0, "function": {"name": 3}}]}},
    "tool_calls an int": {"delta": {"tool_calls": 1}},
    "delta a list": {"delta": []},
    "content an object": {"delta": {"content": {"a": 1}}},
    "finish_reason an int": {"finish_reason": 1},
}


@pytest.mark.parametrize("fields", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_chunk_ends_the_stream_with_an_error_and_a_stored_failure(
    gym: AppHarness, fields: dict[str, Any]
) -> None:
    chunk = {"model": "m", "choices": [{"index": 0, "finish_reason": None, **fields}]}
    bad = b"data: " + orjson.dumps(chunk) + b"\n\n"
    async with scripted(sends(SSE, event("the"), bad, event("", finish="stop"))) as url:
        episode = await open_episode(gym, url)
        streamed = await chat(gym, episode, stream=True)
    error = last_event(streamed)["error"]
    assert error["code"] == "policy_error" and "malformed chunk" in error["message"]
    assert (await stored(gym, episode))[:3] == ("failed", "policy_error", 0)


async def test_choices_that_are_not_a_list_are_malformed_too(gym: AppHarness) -> None:
    async with scripted(sends(SSE, b'data: {"choices": 1}\n\n')) as url:
        episode = await open_episode(gym, url)
        assert "choices" in last_event(await chat(gym, episode, stream=True))["error"]["message"]
    assert (await stored(gym, episode))[:3] == ("failed", "policy_error", 0)


# 5. One parse of the upstream's URL, for the allow-list and the connection


@pytest.mark.parametrize(
    ("upstream", "why"),
    [
        ("http://127.0.0.1:99999/v1", "port"),
        ("http://127.0.0.1:+80/v1", "port"),
        ("http://127.0.0.1:-1/v1", "port"),
        ("http://127.0.0.1:１８３０１/v1", "port"),
        ("http://127.0.0.1:18301/tenantB/../tenantA/v1", "dot segments"),
    ],
)
async def test_urls_that_parsers_read_differently_are_refused_at_creation(
    tmp_path: Path, upstream: str, why: str
) -> None:
    allowed = ["http://127.0.0.1", "http://127.0.0.1:18301/tenantA"]
    async with serving(tmp_path, rollout_runs={"policy_urls": allowed}) as gym:
        body = {"env": "counter", "gateway": {"upstream": upstream}}
        refused = await gym.client.post("/v1/sessions", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["type"].endswith("endpoint-not-allowed") and why in refused.json()["detail"]
        assert (await gym.client.get("/v1/rollouts")).json()["total"] == 0


# 6. A deadline over the whole call; interim answers skipped


async def trickle(writer: asyncio.StreamWriter) -> None:
    """A whole answer's head one byte every 0.1 s: each read within the read timeout, 3 s in all."""
    for byte in whole(answer())[:30]:
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.1)


async def drip(writer: asyncio.StreamWriter) -> None:
    """A stream's events one every 0.1 s, each within the read timeout, 3 s in all."""
    writer.write(SSE)
    for _ in range(30):
        writer.write(event())
        await writer.drain()
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("script", [trickle, drip], ids=["whole", "stream"])
async def test_an_upstream_that_trickles_is_cut_at_the_call_deadline(gym: AppHarness, script: Script) -> None:
    async with scripted(script) as url:
        episode = await open_episode(gym, url)
        if script is trickle:
            error = openai_error(await chat(gym, episode), 504)
        else:
            error = last_event(await chat(gym, episode, stream=True))["error"]
    assert error["code"] == "policy_timeout" and "GYM_GATEWAY__CALL_DEADLINE_S" in error["message"]
    assert (await stored(gym, episode))[:3] == ("failed", "policy_timeout", 0)


EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_interim_answer_is_skipped(gym: AppHarness, stream: bool) -> None:
    final = (SSE + event("done", finish="stop") + b"data: [DONE]\n\n") if stream else whole(answer())

    async def hints_first(writer: asyncio.StreamWriter) -> None:
        writer.write(EARLY_HINTS)
        await writer.drain()
        await asyncio.sleep(0.2)  # the interim head is read alone
        writer.write(final)

    async with scripted(hints_first) as url:
        episode = await open_episode(gym, url)
        assert (await chat(gym, episode, stream=stream)).status_code == 200
    assert (await gym.client.delete(f"/v1/sessions/{episode['session_id']}")).status_code == 204
    assert (await stored(gym, episode))[2] == 1


# 9. The upstream's key is not relayed; the front's refusals speak OpenAI's shape on its routes


ECHOES = {
    "a server error": (sends(whole(orjson.dumps({"error": {"message": f"bad key {KEY}"}}), 500)), False),
    "a refusal": (sends(whole(orjson.dumps({"error": {"message": f"bad key {KEY}"}}), 401)), False),
    "a stream's error event": (
        sends(SSE, b'data: {"error": {"message": "bad key ' + KEY.encode() + b'"}}\n\n'),
        True,
    ),
    "an answer": (sends(whole(answer(f"my key is {KEY}"))), False),
}


@pytest.mark.parametrize(("script", "stream"), ECHOES.values(), ids=ECHOES.keys())
async def test_the_upstreams_key_is_never_relayed_or_stored(
    gym: AppHarness, script: Script, stream: bool
) -> None:
    async with scripted(script) as url:
        episode = await open_episode(gym, url, api_key=KEY)
        relayed = await chat(gym, episode, stream=stream)
    await gym.client.delete(f"/v1/sessions/{episode['session_id']}")
    assert KEY not in relayed.text and "[redacted]" in relayed.text
    assert KEY.encode() not in (await stored(gym, episode))[3]


async def test_body_refusals_on_the_openai_routes_are_in_openais_shape(tmp_path: Path) -> None:
    async with serving(tmp_path, limits={"max_body_bytes": 4096}) as gym, scripted(sends()) as url:
        episode = await open_episode(gym, url)
        path = f"{episode['gateway']['base_url']}/chat/completions"
        text = await gym.client.post(path, content=b"{}", headers={"content-type": "text/plain"})
        assert openai_error(text, 415)["code"] == "unsupported-media-type"
        large = await gym.client.post(path, json={"messages": [{"role": "user", "content": "x" * 8192}]})
        assert openai_error(large, 413)["code"] == "payload-too-large"
        native = await gym.client.post("/v1/sessions", content=b"{}", headers={"content-type": "text/plain"})
        assert native.status_code == 415 and native.headers["content-type"] == "application/problem+json"


# 10. A call's samples are there right after the call


async def test_a_streamed_calls_sample_is_there_right_after_the_stream(tmp_path: Path) -> None:
    # Live rows are snapshots (every 5 reaper rounds): none is taken during this test.
    async with serving(tmp_path, sessions={"reap_interval_s": 60.0}) as gym:
        async with scripted(sends(SSE, event("done", finish="stop"), b"data: [DONE]\n\n")) as url:
            episode = await open_episode(gym, url)
            assert (await chat(gym, episode, stream=True)).status_code == 200
        samples = (await gym.client.get(f"/v1/rollouts/{episode['session_id']}/samples")).json()
        assert (samples["num_calls"], samples["samples"][0]["completion_ids"]) == (1, [7])
