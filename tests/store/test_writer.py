"""`TrajectoryStore` on real databases: batching, coalescing, reads, lifecycle, and surviving an outage
(see the `outage` fixture for how a database is taken down)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from gym_server.core.errors import StoreRefused, StoreUnavailable
from gym_server.store.migrate import upgrade_database
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import TrajectoryFilter
from gym_server.store.write_link import WriteLink, loop_engine, write_engine
from gym_server.store.writer import TrajectoryStore

RecordFactory = Callable[..., TrajectoryRecord]
Outage = Callable[[str], AbstractContextManager[None]]


async def eventually(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll until `predicate()` holds; fail at the deadline (a safety net, not a performance bound)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached before the deadline")
        await asyncio.sleep(0.005)


@pytest.fixture
async def eager_store(empty_url: str) -> AsyncIterator[TrajectoryStore]:
    """A store on a private database that writes on its own every 10 ms and retries quickly."""
    url = f"{empty_url}?timeout=0.05" if empty_url.startswith("sqlite") else empty_url
    trajectory_store = TrajectoryStore(url, flush_interval_s=0.01, max_backoff_s=0.05)
    await trajectory_store.start()
    yield trajectory_store
    await trajectory_store.stop(drain_timeout_s=5.0)


async def test_record_flush_get(store: TrajectoryStore, full_record: TrajectoryRecord) -> None:
    store.record(full_record)
    assert store.pending == 1
    assert await store.get(full_record.id) is full_record  # read-your-writes before the flush
    assert await store.count() == 0
    await store.flush()
    assert (store.pending, store.written, store.healthy, store.last_error) == (0, 1, True, None)
    stored = await store.get(full_record.id)
    assert stored == full_record
    assert stored is not full_record
    assert await store.get("missing") is None


async def test_same_id_coalesces_while_queued(store: TrajectoryStore, make_record: RecordFactory) -> None:
    versions = [make_record(id="s1", num_turns=n) for n in range(3)]
    other = make_record()
    for record in [versions[0], other, *versions[1:]]:
        store.record(record)
    assert store.pending == 2
    await store.flush()
    assert store.written == 2
    assert await store.get("s1") == versions[-1]
    store.record(make_record(id="s1", status=TrajectoryStatus.COMPLETED, reward=1.0))
    await store.flush()
    stored = await store.get("s1")
    assert stored is not None
    assert (stored.status, stored.reward, store.written) == ("completed", 1.0, 3)


async def test_full_batch_is_written_without_waiting_for_the_window(
    store_url: str, make_record: RecordFactory
) -> None:
    store = TrajectoryStore(store_url, flush_interval_s=3600.0, batch_size=4)
    await store.start()
    try:
        records = [make_record() for _ in range(10)]
        for record in records:
            store.record(record)
        await eventually(lambda: store.written >= 8)  # two full batches; the window never elapsed
        await store.flush()
        assert store.written == 10
        assert await store.list(limit=100) == sorted(records, key=lambda r: r.created_at, reverse=True)
    finally:
        await store.stop()


async def test_stop_flushes_and_is_idempotent(store_url: str, make_record: RecordFactory) -> None:
    store = TrajectoryStore(store_url, flush_interval_s=3600.0)
    await store.start()
    records = [make_record() for _ in range(5)]
    for record in records:
        store.record(record)
    await store.stop()
    await store.stop()
    assert (store.pending, store.written) == (0, 5)
    with pytest.raises(RuntimeError, match="stopped"):
        store.record(make_record())
    assert not await store.ping()
    reopened = TrajectoryStore(store_url)
    await reopened.start()
    try:
        assert await reopened.count() == 5
    finally:
        await reopened.stop()


async def test_queries_through_the_store(store: TrajectoryStore, make_record: RecordFactory) -> None:
    records = [make_record(run="r", server_name="me") for _ in range(4)]
    records += [make_record(run="q", status=TrajectoryStatus.COMPLETED, server_name="me")]
    for record in records:
        store.record(record)
    await store.flush()
    assert await store.ping()
    assert await store.count(run="r") == 4
    assert [r.id for r in await store.list(run="r", offset=1, limit=2)] == [records[2].id, records[1].id]
    assert await store.list(env="math", task_id="task-1", status=TrajectoryStatus.LIVE) == [records[1]]
    assert await store.mark_lost("me") == 4
    assert await store.count(status=TrajectoryStatus.LOST) == 4
    rescore = await store.add_rescore(records[4].id, reward=0.5, components={"a": 0.5}, verifier_version="v9")
    assert rescore.previous_reward is None
    assert await store.list_rescores(records[4].id) == [rescore]


async def test_pages_carry_the_total_of_every_match(
    store: TrajectoryStore, make_record: RecordFactory
) -> None:
    records = [make_record(run="paged") for _ in range(5)] + [make_record(run="other")]
    for record in records:
        store.record(record)
    await store.flush()
    paged = TrajectoryFilter(run="paged")
    items, total = await store.page(paged, offset=1, limit=2)
    assert ([r.id for r in items], total) == ([records[3].id, records[2].id], 5)
    assert await store.page(paged, offset=5, limit=2) == ([], 5)  # past the end: counted on its own
    assert await store.page(TrajectoryFilter(run="nobody")) == ([], 0)


async def test_a_page_and_its_total_agree_while_the_writer_commits(
    eager_store: TrajectoryStore, make_record: RecordFactory
) -> None:
    """Rows and total are read together: a page never says "3 in all" beside fewer items (a CI flake
    once did, when a SELECT and a COUNT straddled one of the writer's commits)."""
    records = [make_record(run="racing") for _ in range(40)]

    async def write_one_at_a_time() -> None:
        for record in records:
            eager_store.record(record)
            await asyncio.sleep(0.003)

    writing = asyncio.create_task(write_one_at_a_time())
    deadline = time.monotonic() + 30
    total = 0
    try:
        while total < len(records):
            items, total = await eager_store.page(TrajectoryFilter(run="racing"), limit=500)
            assert len(items) == total
            assert time.monotonic() < deadline, f"only {total} of {len(records)} stored after 30 s"
    finally:
        writing.cancel()


async def test_a_record_the_database_rejects_is_skipped(
    store: TrajectoryStore, make_record: RecordFactory
) -> None:
    good = [make_record() for _ in range(3)]
    bad = make_record(metadata={"not json": object()})
    for record in [good[0], bad, *good[1:]]:
        store.record(record)
    await store.flush()
    assert (store.written, store.dropped, store.pending, store.healthy) == (3, 1, 0, True)
    stored_ids = {record.id for record in await store.list()}
    assert stored_ids == {record.id for record in good}


async def test_a_refused_record_is_never_acknowledged_and_is_written_again_when_asked(
    store: TrajectoryStore, make_record: RecordFactory
) -> None:
    bad = make_record(metadata={"not json": object()})
    store.record(bad)
    for _ in range(2):  # asking again writes it again, and it is refused again: never a plain return
        with pytest.raises(StoreRefused, match=bad.id):
            await store.committed(bad.id)
        assert (store.pending, store.refused) == (0, 1)
    assert store.dropped == 2
    assert await store.get(bad.id) is None
    # A newer version of the id supersedes the refused one; once it is written, the id is committed.
    store.record(make_record(id=bad.id))
    assert store.refused == 0
    await store.committed(bad.id)
    assert (await store.get(bad.id)) is not None
    await store.committed(bad.id)  # nothing left to write
    # `forget` drops a refusal nobody will ask about again: then there is nothing to write. This one is
    # too deep for the JSON writer, and for `repr`: describing its refusal once killed the writer thread.
    deep: Any = 1
    for _ in range(300):
        deep = [deep]
    other = make_record(metadata={"deep": deep})
    store.record(other)
    with pytest.raises(StoreRefused):
        await store.committed(other.id)
    store.forget(other.id)
    assert store.refused == 0
    await store.committed(other.id)
    assert store.healthy
    store.record(make_record(id=other.id))
    await store.committed(other.id)  # the writer thread is alive and writing


async def test_writer_survives_an_outage(
    eager_store: TrajectoryStore, make_record: RecordFactory, outage: Outage
) -> None:
    store = eager_store
    before = make_record()
    store.record(before)
    await store.flush()
    records = [make_record() for _ in range(5)]
    with outage(store._url):
        for record in records:
            store.record(record)
        await eventually(lambda: not store.healthy)
        assert store.last_error
        assert store.pending == 5
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await store.flush()
        # Queued ids still coalesce while down (a write already under way may still carry the older version).
        replacement = make_record(id=records[0].id, reward=0.25)
        store.record(replacement)
        assert store.pending == 5
        if store._url.startswith("postgresql"):
            with pytest.raises(StoreUnavailable, match="unavailable"):
                await store.get(before.id)
            assert not await store.ping()
    async with asyncio.timeout(30):
        await store.flush()
    assert (store.healthy, store.pending, store.dropped) == (True, 0, 0)  # healthy: last_error is None
    assert await store.count() == 6
    assert (await store.get(records[0].id)) == replacement
    assert await store.ping()


async def test_stop_gives_up_after_the_drain_timeout_when_the_database_stays_down(
    eager_store: TrajectoryStore, make_record: RecordFactory, outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    store = eager_store
    with outage(store._url), caplog.at_level(logging.ERROR, logger="gym_server.store.writer"):
        store.record(make_record())
        await eventually(lambda: not store.healthy)
        waiting = asyncio.ensure_future(store.flush())
        await store.stop(drain_timeout_s=0.2)
        with pytest.raises(StoreUnavailable, match="1 trajectories unwritten"):
            await waiting
    assert store.pending == 1
    assert "stopped with 1 trajectories unwritten" in caplog.text


async def test_lifecycle_misuse(store_url: str, make_record: RecordFactory) -> None:
    store = TrajectoryStore(store_url)
    assert not await store.ping()
    await store.flush()  # nothing queued: nothing to wait for
    store.record(make_record())
    with pytest.raises(RuntimeError, match="not running"):
        await store.flush()
    with pytest.raises(RuntimeError, match="not running"):
        await store.count()
    await store.start()
    with pytest.raises(RuntimeError, match="starts once"):
        await store.start()
    await store.flush()
    assert store.written == 1
    await store.stop()


@pytest.mark.parametrize(
    "kwargs",
    [{"flush_interval_s": 0}, {"batch_size": 0}, {"max_backoff_s": -1.0}],
    ids=["interval", "batch", "backoff"],
)
def test_invalid_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        TrajectoryStore("sqlite:///x.db", **kwargs)  # type: ignore[arg-type]


def test_repr_hides_the_password() -> None:
    store = TrajectoryStore("postgresql://gym:s3cret@db.example/gym")
    assert repr(store) == (
        "TrajectoryStore(url='postgresql://gym:***@db.example/gym', pending=0, written=0, healthy=True)"
    )


async def test_start_fails_clearly_on_an_unusable_sqlite_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    store = TrajectoryStore(f"sqlite:///{tmp_path / 'file' / 'gym.db'}")
    with pytest.raises(StoreUnavailable, match="cannot migrate"):
        await store.start()


@pytest.mark.postgres
async def test_start_fails_clearly_on_a_missing_postgres_database() -> None:
    store = TrajectoryStore("postgresql+psycopg://postgres:pw@127.0.0.1:5432/gym_no_such_database")
    with pytest.raises(
        StoreUnavailable, match=r"cannot migrate .*postgres:\*\*\*@.*does not exist"
    ) as caught:
        await store.start()
    assert "pw@" not in caught.value.detail


async def test_acknowledged_one_at_a_time_on_a_sqlite_file_the_wal_stays_bounded(
    tmp_path: Path, make_record: RecordFactory
) -> None:
    """One-row commits made for acknowledgements (on the event loop, for a SQLite file) leave the WAL's
    checkpoints to the writer thread; without them the WAL grew by every commit's pages for good."""
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    store = TrajectoryStore(url, flush_interval_s=3600.0)  # the thread wakes only when asked to
    await store.start()
    try:
        for _ in range(400):  # about 400 x 16 pages: past the 1,000 pages SQLite checkpoints at by default
            record = make_record(messages=[{"role": "user", "content": "x" * 2000}])
            store.record(record)
            await store.committed(record.id)
        assert (store.pending, store.written) == (0, 400)
        # SQLite starts the WAL from its beginning again after a checkpoint; it never shrinks the file, so
        # its size is the most pages one stretch between checkpoints held: well below the 400 commits'.
        assert (tmp_path / "gym.db-wal").stat().st_size < 16 * 1024 * 1024
    finally:
        await store.stop()
    assert await _count_rows(url) == 400


@pytest.mark.parametrize("overtaken", ["no", "by a reader's snapshot", "by a commit"])
def test_a_checkpoint_that_commits_overtook_is_finished_under_the_write_lock(
    tmp_path: Path, make_record: RecordFactory, overtaken: str
) -> None:
    """The thread checkpoints without the write lock, so the loop's commits go on meanwhile; SQLite starts
    the WAL afresh only after a checkpoint copied all of it and before another commit, so one that commits
    overtook is finished under the lock. Overtaken two ways: a reader's snapshot holds the last pages back
    (the pass copies less than the WAL holds), or a loop commit lands once the pass has read the WAL's
    length (the pass copies all it saw: only the loop's commit count shows it). Either way the next commit
    starts the WAL from its beginning."""
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    upgrade_database(url)
    engine = loop_engine(url)  # no automatic checkpoints: the WAL grows until one is made
    assert engine is not None
    writes = WriteLink(engine)
    for _ in range(80):  # one commit each, about 1,300 pages: past the length that asks for a full copy
        writes.upsert([make_record(messages=[{"role": "user", "content": "x" * 2000}])])
    reader = sqlite3.connect(tmp_path / "gym.db")
    if overtaken == "by a reader's snapshot":
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM trajectories").fetchall()  # its snapshot: the pages so far
        writes.upsert([make_record()])  # pages past the snapshot, which no checkpoint may copy yet
    results: list[tuple[int, int, bool]] = []
    store = TrajectoryStore(url)

    class Recording(WriteLink):
        def checkpoint(self) -> tuple[int, int]:
            total, copied = super().checkpoint()
            results.append((total, copied, store._write_lock.locked()))
            if reader.in_transaction:
                reader.rollback()  # the overtaking commit is done: nothing holds the pages back now
            if overtaken == "by a commit" and len(results) == 1:
                writes.upsert([make_record()])  # the loop commits while the pass syncs the files
                store._loop_commits += 1
            return total, copied

    checkpoints = Recording(write_engine(url))
    looking = WriteLink(write_engine(url))
    try:
        store._checkpoint(checkpoints)
        writes.upsert([make_record()])
        frames_after_next_commit = looking.checkpoint()[0]
    finally:
        for link in (checkpoints, looking, writes):
            link.close()
        reader.close()
    (total, copied, locked), *second = results
    assert total > 1_000 and not locked  # the first copy: without the lock
    if overtaken == "no":
        assert copied == total and second == []
    else:
        # a reader held pages back: the pass says so; a commit came after it: the pass copied all it saw
        assert copied < total if overtaken == "by a reader's snapshot" else copied == total
        assert len(second) == 1 and second[0][2] is True and second[0][0] == second[0][1]
    # The WAL began afresh: it holds the one commit made after the checkpoint, not the 80 before it.
    assert frames_after_next_commit < 100


async def _count_rows(url: str) -> int:
    reopened = TrajectoryStore(url)
    await reopened.start()
    try:
        return await reopened.count()
    finally:
        await reopened.stop()
