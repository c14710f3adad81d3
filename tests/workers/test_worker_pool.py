"""The killable worker pool: results, timeouts that kill and replace, crashes, leak-free close, threads."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import worker_fns as fns

from gym_server.workers import PoolClosed, RemoteTraceback, WorkerCrashed, WorkerPool, WorkerTimeout


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(size=2, name="test") as created:
        yield created


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as dead, but is reported by `_zombie`)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _in_group(pgid: int) -> list[int]:
    """Every process (zombies included) whose process group is `pgid`, from a /proc scan."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def _wait_for(condition: object, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(condition) or not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_results_are_correct_sync_and_async(pool: WorkerPool) -> None:
    assert [pool.run_sync(fns.add, i, 1, timeout_s=10) for i in range(20)] == list(range(1, 21))

    async def many() -> list[int]:
        return await asyncio.gather(*(pool.run(fns.add, i, 2, timeout_s=10) for i in range(20)))

    assert asyncio.run(many()) == list(range(2, 22))


def test_exception_in_the_call_is_reraised_with_the_remote_traceback(pool: WorkerPool) -> None:
    worker_pid = pool.run_sync(fns.pid, timeout_s=10)
    with pytest.raises(ValueError, match="boom") as raised:
        pool.run_sync(fns.fail, "boom", timeout_s=10)
    assert isinstance(raised.value.__cause__, RemoteTraceback)
    assert "fail" in str(raised.value.__cause__)
    assert worker_pid in pool.pids()  # an ordinary exception keeps the worker


def test_unpicklable_argument_fails_before_taking_a_worker(pool: WorkerPool) -> None:
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pool.run_sync(fns.add, lambda: 1, 2, timeout_s=10)  # type: ignore[arg-type]
    assert pool.run_sync(fns.add, 1, 2, timeout_s=10) == 3


def test_unpicklable_result_is_an_error_not_a_hang(pool: WorkerPool) -> None:
    with pytest.raises(Exception, match="pickle"):
        pool.run_sync(fns.unpicklable, timeout_s=10)
    assert pool.run_sync(fns.add, 1, 2, timeout_s=10) == 3


def test_timeout_kills_the_worker_and_replaces_it() -> None:
    with WorkerPool(size=1, name="test") as pool:
        victim = pool.run_sync(fns.pid, timeout_s=10)
        started = time.monotonic()
        with pytest.raises(WorkerTimeout, match=r"0\.3 s"):
            pool.run_sync(fns.spin, timeout_s=0.3)
        assert time.monotonic() - started < 2.0
        _wait_for(lambda: not _running(victim))
        _wait_for(lambda: pool.pids() and victim not in pool.pids())
        assert pool.run_sync(fns.add, 2, 2, timeout_s=10) == 4
        assert pool.run_sync(fns.pid, timeout_s=10) != victim


def test_timeout_kills_the_whole_process_group() -> None:
    with WorkerPool(size=1, name="test") as pool:
        worker = pool.run_sync(fns.pid, timeout_s=10)
        grandchild = pool.run_sync(fns.spawn_grandchild, timeout_s=10)
        assert _running(grandchild)
        with pytest.raises(WorkerTimeout):
            pool.run_sync(fns.spin, timeout_s=0.3)
        _wait_for(lambda: not _running(worker) and not _running(grandchild))


def test_async_timeout_gives_worker_timeout() -> None:
    async def scenario(pool: WorkerPool) -> None:
        with pytest.raises(WorkerTimeout):
            await pool.run(fns.spin, timeout_s=0.3)
        assert await pool.run(fns.add, 1, 1, timeout_s=10) == 2

    with WorkerPool(size=1, name="test") as pool:
        asyncio.run(scenario(pool))


def test_crash_is_reported_and_recovered(pool: WorkerPool) -> None:
    with pytest.raises(WorkerCrashed):
        pool.run_sync(fns.crash, 3, timeout_s=10)
    assert pool.run_sync(fns.add, 1, 1, timeout_s=10) == 2

    async def crash_async() -> None:
        with pytest.raises(WorkerCrashed):
            await pool.run(fns.crash, 4, timeout_s=10)
        assert await pool.run(fns.add, 2, 3, timeout_s=10) == 5

    asyncio.run(crash_async())


def test_memory_limit_turns_a_runaway_allocation_into_memory_error() -> None:
    with WorkerPool(size=1, memory_limit_bytes=512 << 20, name="test") as pool:
        with pytest.raises(MemoryError):
            pool.run_sync(fns.allocate, 1024, timeout_s=10)
        assert pool.run_sync(fns.allocate, 8, timeout_s=10) == 8 << 20


def test_concurrency_is_bounded_by_the_pool_size() -> None:
    async def scenario(pool: WorkerPool) -> float:
        started = time.monotonic()
        await asyncio.gather(*(pool.run(fns.sleep_then, 0.3, i, timeout_s=10) for i in range(4)))
        return time.monotonic() - started

    with WorkerPool(size=2, name="test") as pool:
        pool.start()
        assert asyncio.run(scenario(pool)) >= 0.55  # 4 calls of 0.3 s on 2 workers: two rounds
        assert len(pool.pids()) == 2


def test_the_event_loop_keeps_running_during_a_call(pool: WorkerPool) -> None:
    async def scenario() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        assert await pool.run(fns.sleep_then, 0.5, 7, timeout_s=10) == 7
        task.cancel()
        return ticks

    assert asyncio.run(scenario()) >= 20


def test_cancelled_call_kills_its_worker_and_no_stale_reply_leaks(pool: WorkerPool) -> None:
    async def scenario() -> None:
        call = asyncio.create_task(pool.run(fns.sleep_then, 5.0, 99, timeout_s=10))
        await asyncio.sleep(0.3)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        results = await asyncio.gather(*(pool.run(fns.add, i, 0, timeout_s=10) for i in range(6)))
        assert results == list(range(6))

    asyncio.run(scenario())


def test_works_from_a_non_main_thread(pool: WorkerPool) -> None:
    results: dict[str, object] = {}

    def sync_in_thread() -> None:
        results["sync"] = pool.run_sync(fns.add, 20, 1, timeout_s=10)
        try:
            pool.run_sync(fns.spin, timeout_s=0.3)
        except WorkerTimeout:
            results["timeout"] = True

    def loop_in_thread() -> None:
        results["async"] = asyncio.run(pool.run(fns.add, 40, 2, timeout_s=10))

    threads = [threading.Thread(target=sync_in_thread), threading.Thread(target=loop_in_thread)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {"sync": 21, "timeout": True, "async": 42}


def test_workers_are_recycled_after_max_calls() -> None:
    with WorkerPool(size=1, max_calls_per_worker=3, name="test") as pool:
        first = {pool.run_sync(fns.pid, timeout_s=10) for _ in range(3)}
        later = pool.run_sync(fns.pid, timeout_s=10)
        assert len(first) == 1
        assert later not in first


def test_close_leaves_no_process_behind() -> None:
    pool = WorkerPool(size=3, name="test")
    pool.start()
    pool.run_sync(fns.spawn_grandchild, timeout_s=10)
    workers = pool.pids()
    assert len(workers) == 3 and all(_running(pid) for pid in workers)
    pool.close()
    pool.close()  # idempotent
    assert not any(_running(pid) for pid in workers)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]  # joined: no zombie either
    # Grandchildren get SIGKILL with their group; close() joins the workers only, so allow them a moment.
    _wait_for(lambda: not [pid for worker in workers for pid in _in_group(worker) if _running(pid)])
    names = {child.name for child in multiprocessing.active_children()}
    assert "test-worker" not in names
    with pytest.raises(PoolClosed):
        pool.run_sync(fns.add, 1, 1, timeout_s=10)


def test_close_wakes_queued_and_running_callers() -> None:
    pool = WorkerPool(size=1, name="test")

    async def scenario() -> list[BaseException | int]:
        running = asyncio.create_task(pool.run(fns.sleep_then, 5.0, 1, timeout_s=10))
        queued = asyncio.create_task(pool.run(fns.add, 1, 1, timeout_s=10))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(pool.close)
        return list(await asyncio.gather(running, queued, return_exceptions=True))

    outcomes = asyncio.run(scenario())
    assert all(isinstance(outcome, PoolClosed) for outcome in outcomes), outcomes


def test_spawn_context_works_too() -> None:
    with WorkerPool(size=1, context="spawn", name="test") as pool:
        assert pool.run_sync(fns.add, 3, 4, timeout_s=60) == 7
        with pytest.raises(WorkerTimeout):
            pool.run_sync(fns.spin, timeout_s=0.3)
        assert pool.run_sync(fns.add, 1, 1, timeout_s=60) == 2


def test_pool_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least one"):
        WorkerPool(size=0)


def test_repr_names_the_state() -> None:
    pool = WorkerPool(size=1, name="shown")
    assert "shown" in repr(pool)
    pool.close()
    assert "closed" in repr(pool)
    assert os.getpid() not in pool.pids()
