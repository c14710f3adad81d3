"""Helpers shared by the API, end-to-end and CLI tests: message builders and a counter episode."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson

T = TypeVar("T")

# Stored trajectories appear when the writer thread flushes; on a loaded 2-core machine that can take
# seconds, so waits are generous deadlines, never a fixed number of tries.
STORE_WAIT_S = 30.0
ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def golden_file(env: str) -> Path:
    """A built-in environment's golden fixtures in the checkout (`environments/<env>/gym_env_<env>/`)."""
    return ROOT / "environments" / env / f"gym_env_{env}" / "fixtures" / "golden.jsonl"


def console_script(
    *args: str, cwd: Path, pythonpath: Sequence[Path] = ()
) -> subprocess.CompletedProcess[str]:
    """Run `gym-server ARGS` in a subprocess the way pip's console-script wrapper does: import the entry
    point named in pyproject.toml's `[project.scripts]` and call it. `pythonpath` goes first on the path."""
    module, _, function = PYPROJECT["project"]["scripts"]["gym-server"].partition(":")
    code = f"import sys; from {module} import {function}; sys.exit({function}())"
    path = os.pathsep.join([*map(str, pythonpath), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200", "GYM_LOG_LEVEL": "warning"}
    env.pop("PYTHONWARNINGS", None)
    command = [sys.executable, "-c", code, *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def poll(fetch: Callable[[], T], done: Callable[[T], bool], timeout_s: float = STORE_WAIT_S) -> T:
    """`fetch()` again every 50 ms until `done(value)`, then that value; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still not done after {timeout_s:.0f} s: {value!r:.500}")
        time.sleep(0.05)


def stored_run(gym_url: str, run: str, episodes: int) -> dict[str, Any]:
    """The page of a run's stored trajectories once all `episodes` are stored and none is live.

    The count matters: the writer commits in batches, so an episode closed a moment ago may not be in
    the store at all yet, and "none live" alone would pass on the rows written so far."""
    page: dict[str, Any] = poll(
        lambda: httpx.get(f"{gym_url}/v1/rollouts", params={"run": run, "limit": 500}).json(),
        lambda page: page["total"] == episodes and all(item["status"] != "live" for item in page["items"]),
    )
    return page


async def apoll(
    fetch: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout_s: float = STORE_WAIT_S
) -> T:
    """`poll` for an async `fetch`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still not done after {timeout_s:.0f} s: {value!r:.500}")
        await asyncio.sleep(0.05)


def assert_problem(response: httpx.Response, status: int, needle: str) -> dict[str, Any]:
    """The response is a problem+json of `status` whose detail says `needle`, and carries no traceback."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = dict(response.json())
    assert body["status"] == status
    assert body["type"].startswith("urn:gym-server:problem:")
    assert needle in body["detail"], body["detail"]
    assert "Traceback" not in response.text and 'File "' not in response.text
    return body


def call(name: str, arguments: Any = None, call_id: str = "c0") -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
    }


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


async def open_counter(
    client: httpx.AsyncClient, task_id: str = "counter-0000", seed: int = 0, **extra: Any
) -> dict[str, Any]:
    response = await client.post(
        "/v1/sessions", json={"env": "counter", "task_id": task_id, "seed": seed, **extra}
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


async def step(client: httpx.AsyncClient, session_id: str, message: dict[str, Any]) -> httpx.Response:
    return await client.post(f"/v1/sessions/{session_id}/step", json={"message": message})


def target_of(messages: list[dict[str, Any]]) -> int:
    """The counter target named in the episode's user prompt."""
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    return int(prompt.split("to ")[1].split(",")[0])


async def solve_counter(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    """Play the counter to its target: read, add in steps of at most 10, submit. Returns the last step."""
    read = (await step(client, session_id, call("read"))).json()
    value = int(read["messages"][0]["content"])
    state = (await client.get(f"/v1/sessions/{session_id}")).json()
    target = target_of(state["messages"])
    while value != target:
        amount = max(-10, min(10, target - value))
        value = int(
            (await step(client, session_id, call("add", {"amount": amount}))).json()["messages"][0]["content"]
        )
    last = await step(client, session_id, call("submit"))
    assert last.status_code == 200, last.text
    return dict(last.json())


async def wait_for_rollout(
    client: httpx.AsyncClient, rollout_id: str, status: str, timeout_s: float = STORE_WAIT_S
) -> dict[str, Any]:
    """Poll the store (the writer batches) until the trajectory reaches `status`."""
    response = await apoll(
        lambda: client.get(f"/v1/rollouts/{rollout_id}"),
        lambda r: r.status_code == 200 and r.json()["status"] == status,
        timeout_s,
    )
    return dict(response.json())


def judge_samples(metrics_text: str, model: str) -> dict[str, float]:
    """The `gym_judge_*` samples of one judge model in a `/metrics` scrape, by sample name."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name.startswith("gym_judge_") and sample.labels.get("model") == model
    }
