"""What the agent-framework peers (langgraph, openai-agents) share: a policy that can play counter, a
recording proxy in front of it, and the two checks every episode must pass.

- `policy`: the tiny model warmed up on counter tool calls (`agent_policy.py`'s cached build, run by
  the project's python), served by `gym-server policy serve`, behind `RecordingProxy`: a loopback HTTP
  proxy that keeps each chat completion's request and the policy server's own answer, byte for byte.
  The gym's gateway is pointed at the proxy (a loopback URL, which the default allow-list admits), so
  the test sees exactly what the policy sampled, independently of what the gateway recorded.
- `assert_token_exact`: the episode's stored samples hold the policy's prompt ids, its sampled ids and
  its logprobs, and the masked tokens between two calls are exactly what the next call's prompt added.
- `assert_native_reward`: the stored reward equals a native replay of the stored transcript
  (`POST /v1/verify` with the messages, which steps a fresh environment with the same task and seed).
- `play_checked`: an episode of a peer's agent through the gym's `play_agent`, with both checks, and that
  every tool call that reached the environment is one the policy sampled (a framework answers a call of
  a tool the server does not list itself); played again, up to `ATTEMPTS` times, until the policy
  called one of the environment's tools.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from gym_servers import Gym, free_port

from gym_trainer.agents import AgentFn, GatewayConfig, play_agent
from gym_trainer.client import GymClient
from gym_trainer.episodes import EpisodeSpec

__all__ = [
    "Policy",
    "PolicyCall",
    "RecordingProxy",
    "assert_native_reward",
    "assert_token_exact",
    "play_checked",
    "policy",
]

AGENT_POLICY = Path(__file__).resolve().parent / "agent_policy.py"
SERVED_NAME = "tiny-counter"
# Episodes `play_checked` plays at most to see the policy call one of the environment's tools. On the
# agents' workplace prompt the warmed policy's first call was `submit` in 16 of 16 samples (8 of 16 after
# 60 submit steps; 0 of 16 when it learned one other task's prompt only, 2026-12-07): 8 is a margin.
ATTEMPTS = 8


@dataclass(frozen=True)
class PolicyCall:
    """One chat completion as the policy server answered it."""

    request: dict[str, Any]
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    tool_calls: list[dict[str, Any]]
    stream: bool


def _read_answer(request: dict[str, Any], body: bytes, event_stream: bool) -> PolicyCall:
    """The policy's ids, logprobs and tool calls from its answer, streamed or not."""
    if not event_stream:
        answer = json.loads(body)
        choice = answer["choices"][0]
        prompt = answer.get("prompt_token_ids") or choice.get("prompt_token_ids") or []
        content = (choice.get("logprobs") or {}).get("content") or []
        calls = choice["message"].get("tool_calls") or []
        return PolicyCall(
            request,
            list(prompt),
            list(choice.get("token_ids") or []),
            [e["logprob"] for e in content],
            [c["function"] for c in calls],
            False,
        )
    prompt: list[int] = []
    ids: list[int] = []
    logprobs: list[float] = []
    calls: list[dict[str, Any]] = []
    for line in body.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[len("data: ") :])
        prompt = prompt or list(chunk.get("prompt_token_ids") or [])
        for choice in chunk.get("choices") or []:
            prompt = prompt or list(choice.get("prompt_token_ids") or [])
            ids += choice.get("token_ids") or []
            logprobs += [e["logprob"] for e in ((choice.get("logprobs") or {}).get("content") or [])]
            calls += [c["function"] for c in (choice.get("delta") or {}).get("tool_calls") or []]
    return PolicyCall(request, prompt, ids, logprobs, calls, True)


class RecordingProxy:
    """A loopback proxy to `upstream` (the policy server's root URL) that records chat completions."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.calls: list[PolicyCall] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _forward(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                data = self.rfile.read(length) if length else None
                headers = {"content-type": self.headers.get("content-type") or "application/json"}
                upstream = urllib.request.Request(proxy.upstream + self.path, data, headers, method=method)
                try:
                    with urllib.request.urlopen(upstream, timeout=600) as response:
                        status, kind, body = (
                            response.status,
                            response.headers.get("content-type", ""),
                            response.read(),
                        )
                except urllib.error.HTTPError as exc:
                    status, kind, body = exc.code, exc.headers.get("content-type", ""), exc.read()
                if method == "POST" and self.path.endswith("/chat/completions") and status == 200:
                    call = _read_answer(json.loads(data or b"{}"), body, "event-stream" in kind)
                    with proxy._lock:
                        proxy.calls.append(call)
                self.send_response(status)
                self.send_header("content-type", kind or "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self) -> list[PolicyCall]:
        """The calls recorded since the last `take` (tests play one episode at a time)."""
        with self._lock:
            calls, self.calls = self.calls, []
        return calls


@dataclass
class Policy:
    """The warmed tiny policy behind the recording proxy: the URL to give the gateway as `upstream`."""

    proxy: RecordingProxy
    name: str
    tasks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def upstream(self) -> str:
        return self.proxy.url


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def warmed_policy(gym: Gym, python: str, env: dict[str, str]) -> Path:
    """The tiny model warmed up on counter (and workplace's `submit`) calls: `agent_policy.py`'s cached
    folder, which run.sh builds before any peer starts (built here, against `gym`, when a peer runs
    alone and the cache lacks it)."""
    ensured = subprocess.run([python, str(AGENT_POLICY), gym.url], capture_output=True, text=True, env=env)
    assert ensured.returncode == 0, ensured.stderr[-4000:]
    return Path(ensured.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def policy(gym: Gym, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Policy]:
    python = os.environ["GYM_INTEROP_PYTHON"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    folder = warmed_policy(gym, python, env)
    port = free_port()
    log = tmp_path_factory.mktemp("policy-log") / "policy.log"
    args = ["policy", "serve", "--model", str(folder), "--served-model-name", SERVED_NAME, "--threads", "1"]
    process = subprocess.Popen(
        [python, "-m", "gym_server.cli.main", *args, "--port", str(port)],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while not _answers(root):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"policy server not ready:\n{log.read_text()}")
        time.sleep(0.2)
    proxy = RecordingProxy(root)
    yield Policy(proxy, SERVED_NAME, json.loads((folder / "tasks.json").read_text()))
    proxy.server.shutdown()
    process.terminate()
    process.wait(timeout=20)


def assert_token_exact(report: dict[str, Any], calls: list[PolicyCall]) -> None:
    """The stored samples (`GET /v1/rollouts/{id}/samples`) against the policy's own answers, in order."""
    assert report["token_exact"] is True
    assert report["num_calls"] == len(calls) >= 1
    covered = [index for sample in report["samples"] for index in sample["calls"]]
    assert covered == list(range(len(calls)))  # every forwarded call, once, in order
    for sample in report["samples"]:
        ids, mask, logprobs = sample["completion_ids"], sample["mask"], sample["logprobs"]
        assert len(ids) == len(mask) == len(logprobs)
        first = calls[sample["calls"][0]]
        assert sample["prompt_ids"] == first.prompt_ids
        sequence = list(sample["prompt_ids"])
        position = 0
        for index in sample["calls"]:
            call = calls[index]
            # What this call's prompt added after the sample so far is stored with mask 0, logprob 0.0.
            assert call.prompt_ids[: len(sequence)] == sequence
            added = call.prompt_ids[len(sequence) :]
            assert ids[position : position + len(added)] == added
            assert mask[position : position + len(added)] == [0] * len(added)
            assert logprobs[position : position + len(added)] == [0.0] * len(added)
            position += len(added)
            # Then exactly the sampled tokens, mask 1, with the policy's logprobs.
            sampled = slice(position, position + len(call.token_ids))
            assert ids[sampled] == call.token_ids
            assert mask[sampled] == [1] * len(call.token_ids)
            assert logprobs[sampled] == call.logprobs
            position += len(call.token_ids)
            sequence = call.prompt_ids + call.token_ids
        assert position == len(ids)


def assert_native_reward(gym: Gym, row: dict[str, Any], task: dict[str, Any] | None = None) -> float:
    """The stored reward equals a native replay of the stored transcript; returns it."""
    body: dict[str, Any] = {"env": row["env"], "seed": row["seed"], "messages": row["messages"]}
    body.update({"task": task} if task is not None else {"task_id": row["task_id"]})
    request = urllib.request.Request(
        f"{gym.url}/v1/verify", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        replayed = json.loads(response.read())
    assert row["reward"] is not None
    assert replayed["reward"] == row["reward"], (replayed, row["reward"])
    return float(row["reward"])


def samples_of(gym: Gym, session_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{gym.url}/v1/rollouts/{session_id}/samples", timeout=30) as response:
        return dict(json.loads(response.read()))


async def play_checked(
    gym: Gym, policy: Policy, agent: AgentFn, spec: EpisodeSpec, *, streamed: bool, run: str
) -> dict[str, Any]:
    """Episodes of `agent` until the policy calls one of the environment's tools (at most `ATTEMPTS`),
    each checked whole (tokens, tool calls, reward); returns the stored row of the first that did.

    The tiny policy samples at temperature 1, so an episode where it writes no well-formed call of a
    listed tool happens (seen on the workplace task, and now and then on counter); such an episode is
    still checked, but proves nothing about tool results, so another is played.
    """
    for _ in range(ATTEMPTS):
        row, executed = await _play_one_checked(gym, policy, agent, spec, streamed=streamed, run=run)
        if executed:
            return row
    raise AssertionError(f"the policy called none of {spec.env}'s tools in {ATTEMPTS} checked episodes")


async def _play_one_checked(
    gym: Gym, policy: Policy, agent: AgentFn, spec: EpisodeSpec, *, streamed: bool, run: str
) -> tuple[dict[str, Any], list[str]]:
    policy.proxy.take()
    config = GatewayConfig(upstream=policy.upstream, model=policy.name, run=run)
    async with GymClient(gym.url) as client:
        result = await play_agent(client, agent, spec, config)
    calls = policy.proxy.take()
    assert result.failure is None and result.reward is not None, result.error
    assert all(call.stream is streamed for call in calls)
    report = samples_of(gym, result.session_id or "")
    assert_token_exact(report, calls)
    assert [s["completion_ids"] for s in report["samples"]] == [s.completion_ids for s in result.samples]
    row = gym.stored(result.session_id or "", "completed")
    assert assert_native_reward(gym, row, spec.task) == result.reward
    known = {tool["function"]["name"] for tool in row["tools"]}
    executed = [c["function"]["name"] for m in row["messages"] for c in m.get("tool_calls") or []]
    sampled = [c["name"] for call in calls for c in call.tool_calls if c["name"] in known]
    # Every call that reached the environment is one the policy sampled. As a multiset, not in order: a
    # framework may run one turn's calls concurrently (LangGraph's tool node does).
    assert not Counter(executed) - Counter(sampled), (executed, sampled)
    return row, executed
