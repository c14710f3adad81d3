"""A dataset's first use from many threads at once (the server loads data in worker threads, never on
its event loop, so two requests may both be first): one thread loads, the others wait for that index."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from gym_server.sdk.tasks import Dataset


def test_first_use_from_many_threads_loads_one_index() -> None:
    dataset = Dataset("counter")
    start = threading.Barrier(16)

    def first_use(index: int) -> str | None:
        start.wait()
        task = dataset.get(f"counter-{index:04d}")
        return None if task is None else task.id

    with ThreadPoolExecutor(16) as pool:
        found = list(pool.map(first_use, range(16)))
    assert found == [f"counter-{index:04d}" for index in range(16)]  # no "duplicate task id", no misses
    assert len(dataset.tasks()) == sum(dataset.split_sizes().values())
