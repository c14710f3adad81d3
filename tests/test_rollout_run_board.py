"""`RolloutRunBoard`: how many runs play at once, how many finished ones are remembered, and what a
failed or cancelled run reports. The runs here are plain coroutines; the API tests play real ones."""

from __future__ import annotations

import asyncio

import pytest

from gym_server.core.errors import AtCapacity
from gym_server.core.settings import RolloutRunSettings
from gym_server.sessions.rollout_runs import RolloutRun, RolloutRunBoard


def board(max_running: int = 2, keep_finished: int = 3) -> RolloutRunBoard:
    return RolloutRunBoard(RolloutRunSettings(max_running=max_running, keep_finished=keep_finished), 7, 100)


def job(run_id: str) -> RolloutRun:
    return RolloutRun(id=run_id, run=f"run-{run_id}", episodes=1)


class Gate:
    """A run that plays until the test opens its gate."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.open = asyncio.Event()

    async def play(self, _: RolloutRun) -> None:
        self.started.set()
        await self.open.wait()


async def instant(_: RolloutRun) -> None:
    return None


def status(runs: RolloutRunBoard, run_id: str) -> str | None:
    view = runs.view(run_id)
    return None if view is None else str(view["status"])


async def test_one_run_more_than_max_running_is_refused_until_one_finishes() -> None:
    runs = board(max_running=2)
    gates = [Gate(), Gate()]
    tasks = [runs.start(job(f"r{k}"), gate.play) for k, gate in enumerate(gates)]
    with pytest.raises(AtCapacity) as refused:
        runs.start(job("r2"), instant)
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "7"}
    assert "maximum of 2 rollout runs playing" in refused.value.detail
    assert runs.view("r2") is None  # a refused run leaves no trace
    gates[0].open.set()
    await tasks[0]
    await runs.start(job("r2"), instant)
    assert [status(runs, f"r{k}") for k in range(3)] == ["completed", "running", "completed"]
    gates[1].open.set()
    await tasks[1]
    assert runs.running == 0


async def test_only_the_newest_finished_runs_are_remembered() -> None:
    runs = board(keep_finished=3)
    for k in range(5):
        await runs.start(job(f"r{k}"), instant)
    assert [status(runs, f"r{k}") for k in range(5)] == [None, None, "completed", "completed", "completed"]
    assert runs.view("r4") == {
        "run_id": "r4",
        "run": "run-r4",
        "status": "completed",
        "episodes": 1,
        "concurrency": 1,
        "finished": 0,
        "error": None,
        "summary": None,
        "rollout_ids": [],
    }


async def test_keep_finished_zero_forgets_a_run_when_it_ends() -> None:
    runs = board(keep_finished=0)
    gate = Gate()
    task = runs.start(job("r0"), gate.play)
    await gate.started.wait()
    assert runs.view("r0") is not None
    gate.open.set()
    await task
    assert runs.view("r0") is None


async def test_a_run_that_raises_is_failed_with_its_error_and_frees_its_place() -> None:
    runs = board(max_running=1)

    async def broken(_: RolloutRun) -> None:
        raise KeyError("driver bug")

    await runs.start(job("r0"), broken)  # the task itself does not raise
    view = runs.view("r0")
    assert view is not None and (view["status"], view["error"]) == ("failed", "KeyError: 'driver bug'")
    await runs.start(job("r1"), instant)


async def test_aclose_cancels_the_runs_still_playing() -> None:
    runs = board()
    gate = Gate()
    cleaned_up = asyncio.Event()

    async def play(run: RolloutRun) -> None:
        try:
            await gate.play(run)
        finally:
            cleaned_up.set()

    task = runs.start(job("r0"), play)
    await runs.start(job("r1"), instant)
    await gate.started.wait()
    await runs.aclose()
    assert task.cancelled() and cleaned_up.is_set()
    assert (status(runs, "r0"), status(runs, "r1")) == ("cancelled", "completed")
    assert runs.running == 0


async def test_a_tenant_sees_only_its_own_runs_playing_or_finished() -> None:
    runs = board()
    gate = Gate()
    playing = RolloutRun(id="p", run="run-p", episodes=1, tenant="a")
    finished = RolloutRun(id="f", run="run-f", episodes=1, tenant="a")
    task = runs.start(playing, gate.play)
    await runs.start(finished, instant)
    for run_id in ("p", "f"):
        assert runs.view(run_id, "a") is not None
        assert runs.view(run_id) is not None  # keys off: no tenant filter
        assert runs.view(run_id, "b") is None  # another tenant's: as unknown as a run never started
    gate.open.set()
    await task
    assert runs.view("p", "b") is None and runs.view("p", "a") is not None
