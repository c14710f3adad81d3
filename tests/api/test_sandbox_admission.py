"""One cap on running sandboxes and one memory and CPU budget, shared by sessions and `/v1/verify`.

Real sandboxes (bubblewrap; Docker where the engine and image are here) behind the real app. A burst of
verifications over the cap queues and is served, never running more sandboxes at once than the cap (the
admission's high-water mark, and an independent count of the sandbox processes alive); a verification
that waits past its bound, and a session that needs a sandbox while none is free, get 429 with
Retry-After; so does one whose memory or CPU quota the budget cannot hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import AppHarness, serving
from gymtest import apoll

BACKENDS = [
    pytest.param("bubblewrap", marks=pytest.mark.bwrap),
    pytest.param("docker", marks=pytest.mark.docker),
]
TASK = "humaneval-002"  # truncate_number
# Correct, and slow enough at import that a burst's sandboxes overlap.
SLOW_SOLUTION = (
    "```python\nimport time\ntime.sleep(0.5)\n\ndef truncate_number(number):\n    return number % 1.0\n```"
)
SOLUTION = "```python\ndef truncate_number(number):\n    return number % 1.0\n```"


def settings(backend: str, **sandbox: Any) -> dict[str, Any]:
    return {"server_name": f"admission-{uuid.uuid4().hex[:8]}", "sandbox": {"backend": backend, **sandbox}}


def verify(gym: AppHarness, completion: str = SOLUTION) -> Any:
    return gym.client.post("/v1/verify", json={"env": "humaneval", "task_id": TASK, "completion": completion})


async def admission(gym: AppHarness) -> dict[str, Any]:
    ready = await gym.client.get("/readyz")
    state: dict[str, Any] = ready.json()["sandbox"]["admission"]
    return state


async def open_repl(gym: AppHarness) -> httpx.Response:
    return await gym.client.post("/v1/sessions", json={"env": "python_repl", "task_id": "python_repl-0000"})


def assert_busy(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert int(response.headers["Retry-After"]) >= 1
    detail = response.json()["detail"]
    assert all(word in detail for word in words), detail


def bwrap_children() -> int:
    """Sandboxes running code now, counted apart from the admission: this process's own `bwrap` children.

    Only the outer bwrap of each run counts (it lives as long as the sandboxed command); the init of a
    finished run's pid namespace, orphaned to us for a moment, lives in that namespace (two NSpid entries).
    """
    count = 0
    for listing in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        with contextlib.suppress(OSError):  # a thread or a child may end between the reads
            for child in Path(listing).read_text().split():
                status = dict(
                    line.split(":", 1) for line in Path(f"/proc/{child}/status").read_text().splitlines()
                )
                count += status["Name"].strip() == "bwrap" and len(status["NSpid"].split()) == 1
    return count


class Sampler:
    """The most bwrap sandboxes seen running at once, sampled on a thread while a burst runs."""

    def __init__(self) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.most = max(self.most, bwrap_children())

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_burst_of_verifications_never_runs_more_sandboxes_than_the_cap(
    backend: str, tmp_path: Path
) -> None:
    async with serving(tmp_path, **settings(backend, max_running=2, queue_wait_s=120)) as gym:
        with Sampler() as sampler:
            replies = await asyncio.gather(*(verify(gym, SLOW_SOLUTION) for _ in range(12)))
        for reply in replies:
            assert reply.status_code == 200, reply.text  # queued, then served
            assert reply.json()["reward"] == 1.0, reply.text
        if backend == "bubblewrap":  # Docker's run in containers: the admission's count is the witness
            assert 1 <= sampler.most <= 2, sampler.most
        state = await admission(gym)
        assert state["peak"] == 2 and state["running"] == 0 and state["waiting"] == 0


@pytest.mark.bwrap
async def test_over_the_cap_a_session_and_a_verification_that_waited_get_429(tmp_path: Path) -> None:
    async with serving(tmp_path, **settings("bubblewrap", max_running=1, queue_wait_s=0.2)) as gym:
        first = await open_repl(gym)
        assert first.status_code == 201, first.text  # holds the one sandbox until it closes
        assert_busy(await open_repl(gym), "maximum of 1 running sandboxes")
        assert_busy(await verify(gym), "maximum of 1 running sandboxes", "after waiting 0.2 s")
        batch = await gym.client.post(
            "/v1/verify/batch",
            json={"items": [{"env": "humaneval", "task_id": TASK, "completion": SOLUTION}] * 2},
        )
        assert [item["error"]["status"] for item in batch.json()["results"]] == [429, 429]
        assert (await admission(gym))["running"] == 1
        closed = await gym.client.delete(f"/v1/sessions/{first.json()['session_id']}")
        assert closed.status_code == 204
        assert (await admission(gym))["running"] == 0
        assert (await verify(gym)).json()["reward"] == 1.0
        assert (await open_repl(gym)).status_code == 201


@pytest.mark.bwrap
async def test_a_queued_verification_is_served_when_a_sandbox_frees(tmp_path: Path) -> None:
    async with serving(tmp_path, **settings("bubblewrap", max_running=1, queue_wait_s=120)) as gym:
        session = (await open_repl(gym)).json()["session_id"]
        waiting = asyncio.ensure_future(verify(gym))
        await apoll(lambda: admission(gym), lambda state: state["waiting"] == 1)
        assert not waiting.done()
        assert (await gym.client.delete(f"/v1/sessions/{session}")).status_code == 204
        reply = await waiting
        assert reply.status_code == 200 and reply.json()["reward"] == 1.0, reply.text
        assert (await admission(gym))["peak"] == 1


@pytest.mark.bwrap
async def test_the_memory_and_cpu_budget_admit_what_fits_and_refuse_the_rest(tmp_path: Path) -> None:
    # python_repl sandboxes reserve 512 MiB and 1 cpu; code verification 256 MiB and 1 cpu.
    budget = settings("bubblewrap", max_running=50, memory_budget_mb=800, cpu_budget=4, queue_wait_s=0)
    async with serving(tmp_path, **budget) as gym:
        first = await open_repl(gym)
        assert first.status_code == 201, first.text
        assert_busy(await open_repl(gym), "512 of its 800 MiB sandbox memory budget")
        assert (await verify(gym)).json()["reward"] == 1.0  # 512 + 256 fits
        state = await admission(gym)
        assert state["memory_mb"] == 512 and state["cpus"] == 1.0
    cpu_bound = settings("bubblewrap", max_running=50, cpu_budget=1.5, queue_wait_s=0)
    async with serving(tmp_path, **cpu_bound) as gym:
        assert (await open_repl(gym)).status_code == 201
        assert_busy(await verify(gym), "1 of its 1.5 cores of sandbox CPU budget")


@pytest.mark.bwrap
async def test_a_sandbox_larger_than_the_whole_budget_is_a_clear_503(tmp_path: Path) -> None:
    async with serving(tmp_path, **settings("bubblewrap", memory_budget_mb=300)) as gym:
        refused = await open_repl(gym)
        assert refused.status_code == 503, refused.text
        assert "over the server's whole sandbox budget" in refused.json()["detail"]
        assert (await verify(gym)).json()["reward"] == 1.0  # 256 MiB fits


@pytest.mark.bwrap
async def test_a_step_that_ends_the_episode_while_none_is_free_defers_its_score(tmp_path: Path) -> None:
    async with serving(tmp_path, **settings("bubblewrap", max_running=1, queue_wait_s=0.2)) as gym:
        holder = (await open_repl(gym)).json()["session_id"]
        created = await gym.client.post("/v1/sessions", json={"env": "humaneval", "task_id": TASK})
        assert created.status_code == 201, created.text  # humaneval needs no sandbox of its own
        session = created.json()["session_id"]
        step = await gym.client.post(
            f"/v1/sessions/{session}/step", json={"message": {"role": "assistant", "content": SOLUTION}}
        )
        assert step.status_code == 200, step.text  # the step is applied: never a 429 after that
        body = step.json()
        assert body["done"] and body["reward"] is None
        assert "maximum of 1 running sandboxes" in body["info"]["verify_deferred"]
        assert_busy(await gym.client.post(f"/v1/sessions/{session}/verify"), "running sandboxes")
        assert (await gym.client.delete(f"/v1/sessions/{holder}")).status_code == 204
        scored = await gym.client.post(f"/v1/sessions/{session}/verify")
        assert scored.status_code == 200 and scored.json()["reward"] == 1.0, scored.text
