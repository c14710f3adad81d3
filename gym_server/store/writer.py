"""`TrajectoryStore`: the service's handle on the durable store, built so the hot path never waits on it.

Recording a trajectory is a dictionary assignment under a lock: no I/O, no copy, no event-loop hop. A
daemon thread with its own engine wakes every `flush_interval_s` (sooner when a batch is full or someone
awaits `flush()`), takes up to `batch_size` queued records, and upserts them in one transaction. Records with
the same id coalesce while queued: a session recorded at creation and again at close costs one row write if
both land in the same window. An acknowledgement waits for its row with `committed(id)`: the writer wakes at
once, and every waiter of a batch is released after that batch's one transaction (group commit), so a
2xx means committed while a burst of closes still costs one commit, not one each.

On a SQLite file the event loop commits for the acknowledgements itself: a `committed(id)` asks for a
commit at the end of the loop's current iteration (so the requests read in that iteration share it), and
the loop upserts everything queued on its own connection and settles the waiters. Handing each commit to
the thread and back cost more CPU than the commit (a thread wake-up each way, the loop's sleep and wake,
the GIL passed back and forth: measured 0.84 ms of server CPU around a 0.28 ms commit when one client
acknowledges alone, docs/benchmarks.md), and a file's commit is local CPU work that the loop would
otherwise wait out anyway. The loop never waits for SQLite: its connection fails at once when the write
lock is taken (another process writes), never checkpoints the WAL (that fsyncs; the thread does it), and
any failure leaves the rows to the thread, which has the retries and the refusals below. One writer at a
time, loop or thread (`_write_lock`), so an older version of a row can never overwrite a newer one.
PostgreSQL commits across the network, so there the thread commits everything (`write_link`).

Failures are sorted by cause. When the database cannot be reached (connection refused, file locked, disk
full) the rows stay queued, `healthy` turns False with the error, and the thread retries with exponential
backoff, so an outage delays trajectories but never drops them. A record the database rejects for its own
content (it cannot be serialized, or violates a constraint) is retried alone, then logged and set aside, so
one bad row never blocks the queue: its waiters get `StoreRefused`, and the store keeps the record (until a
newer version of the id is written, or `forget(id)`) so that asking `committed(id)` again writes it again
instead of answering as if it were stored. An acknowledgement therefore never follows a refusal. Reads are
`StoreQueries`' (`queries.py`): worker threads on a second engine, `StoreUnavailable` (a 503) when the
database does not answer.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import itertools
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gym_server.core.errors import StoreRefused, StoreUnavailable
from gym_server.store import repository
from gym_server.store.migrate import (
    describe_error,
    is_outage,
    make_engine,
    mask_url,
    refresh_statistics,
    upgrade_database,
)
from gym_server.store.queries import StoreQueries
from gym_server.store.records import TrajectoryRecord
from gym_server.store.write_link import WriteLink, loop_engine, write_engine

__all__ = ["TrajectoryStore"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Waiter:
    seq: int  # everything enqueued up to this number must be written
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


@dataclass(slots=True)
class _Pending:
    record: TrajectoryRecord
    seq: int  # enqueue number of the oldest version of this id not yet written
    # `committed()` callers waiting for this id; a newer version of the id takes them over, since
    # committing it commits everything the older one held
    waiters: builtins.list[_Waiter] = field(default_factory=list)


@dataclass(slots=True)
class _Refused:
    record: TrajectoryRecord
    error: str


# The most transcript text (characters of message contents and tool-call arguments, a cheap stand-in for
# the row's size) a commit on the loop may write: the rows of a few ordinary episodes. Beyond it (an episode
# of megabyte turns, n forks of one) serializing and writing would hold the loop for hundreds of ms, so the
# writer thread commits them (tests/test_event_loop_guard.py, the fork case).
_LOOP_COMMIT_MAX_CHARS = 256 * 1024


def _text_chars(record: TrajectoryRecord) -> int:
    """The characters of `record`'s message contents and tool-call arguments (a string each, mostly)."""
    total = 0
    for message in record.messages:
        content = message.get("content")
        total += len(content) if isinstance(content, str) else 0
        for call in message.get("tool_calls") or ():
            arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
            total += len(arguments) if isinstance(arguments, str) else 0
    return total


# The loop's commits between two WAL checkpoints by the thread: a one-row commit appends about 16 pages
# (the row, its indexes, the totals), so this keeps the WAL near SQLite's own default of 1,000 pages; a
# longer WAL makes every commit dearer (measured: a one-row commit's CPU doubled without checkpoints).
_CHECKPOINT_EVERY = 64
# The WAL's length in pages past which a checkpoint that commits overtook is finished under the write lock
# (SQLite's own automatic checkpoint threshold; about the 64 commits above).
_WAL_RESET_PAGES = 1_000

_Outcome = tuple[asyncio.Future[None], BaseException | None]  # a future and the error to set, if any


def _settle_futures(outcomes: builtins.list[_Outcome]) -> None:
    for future, error in outcomes:
        if not future.done():
            future.set_exception(error) if error else future.set_result(None)


class TrajectoryStore(StoreQueries):
    """Batching, coalescing, outage-proof writer plus async reads over one database URL.

    ```python
    store = TrajectoryStore("sqlite:///var/gym.db")
    await store.start()  # migrates, starts the writer thread
    store.record(TrajectoryRecord(id="s1", env="math", env_version="ab12", task_id="t1"))
    await store.flush()
    assert (await store.get("s1")) is not None
    await store.stop()
    ```

    Args:
        url: SQLAlchemy URL of a SQLite file or a PostgreSQL database.
        flush_interval_s: the batching window of the writer thread.
        batch_size: most rows written in one transaction.
        max_backoff_s: longest wait between retries while the database is down.
    """

    def __init__(
        self, url: str, *, flush_interval_s: float = 0.2, batch_size: int = 256, max_backoff_s: float = 5.0
    ) -> None:
        if flush_interval_s <= 0 or batch_size < 1 or max_backoff_s <= 0:
            raise ValueError("flush_interval_s and max_backoff_s must be positive, batch_size at least 1")
        self._url = url
        self._flush_interval_s = flush_interval_s
        self._batch_size = batch_size
        self._max_backoff_s = max_backoff_s
        self._lock = threading.Lock()  # guards _queue, _seq, _waiters, _closed, _running
        self._write_lock = threading.Lock()  # held by whoever writes a batch: the thread or the loop
        self._queue: dict[str, _Pending] = {}  # insertion order is seq order
        self._seq = 0
        self._waiters: builtins.list[_Waiter] = []
        self._refused: dict[str, _Refused] = {}  # ids whose newest version the database refused
        self._closed = False  # stop() was called: record() refuses
        self._running = False  # the writer thread takes flush() waiters
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._drain_deadline = math.inf
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that commits itself (SQLite files)
        self._loop_link: WriteLink | None = None
        self._loop_commit_due = False
        self._loop_commits = 0  # the thread checkpoints the WAL when this moved
        self._written = 0
        self._dropped = 0
        self._last_error: str | None = None

    def __repr__(self) -> str:
        return (
            f"TrajectoryStore(url={mask_url(self._url)!r}, pending={self.pending}, "
            f"written={self._written}, healthy={self.healthy})"
        )

    @property
    def pending(self) -> int:
        """Records queued or being written, not yet committed (one per id)."""
        return len(self._queue)

    @property
    def written(self) -> int:
        """Rows committed since start (a re-recorded id counts each time it is written)."""
        return self._written

    @property
    def dropped(self) -> int:
        """Records skipped because the database rejected their content; should stay 0."""
        return self._dropped

    @property
    def refused(self) -> int:
        """Trajectories whose newest record the database refused and that were not forgotten since."""
        return len(self._refused)

    @property
    def healthy(self) -> bool:
        """False while the last write attempt failed because the database could not be reached."""
        return self._last_error is None

    @property
    def last_error(self) -> str | None:
        """Why the last write attempt failed, while the store is unhealthy."""
        return self._last_error

    async def start(self) -> None:
        """Bring the schema to head and start the writer thread.

        Raises:
            StoreUnavailable: the database cannot be reached to migrate it.
        """
        if self._thread is not None or self._closed:
            raise RuntimeError("a TrajectoryStore starts once")
        try:
            await asyncio.to_thread(upgrade_database, self._url)
            await asyncio.to_thread(refresh_statistics, self._url)
        except (SQLAlchemyError, OSError) as exc:
            raise StoreUnavailable(
                f"cannot migrate the trajectory database {mask_url(self._url)}: {describe_error(exc)}"
            ) from exc
        self._engine = make_engine(self._url)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        engine = loop_engine(self._url)
        if engine is not None:
            self._loop, self._loop_link = asyncio.get_running_loop(), WriteLink(engine)
        self._thread = threading.Thread(target=self._run, name="trajectory-writer", daemon=True)
        self._running = True
        self._thread.start()

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Write everything queued, then stop the thread; idempotent.

        While the database is down the writer keeps retrying for up to `drain_timeout_s`, then gives up and
        logs how many trajectories were not written. `record` raises once `stop` was called.
        """
        with self._lock:
            self._closed = True
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._drain_deadline = time.monotonic() + drain_timeout_s
            self._stopping.set()
            self._wake.set()
            await asyncio.to_thread(thread.join)
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
            self._sessions = None
        link, self._loop_link, self._loop = self._loop_link, None, None
        if link is not None:
            link.close()
            link.engine.dispose()

    def record(self, rec: TrajectoryRecord) -> None:
        """Queue `rec` to be written; returns at once, never does I/O.

        The store keeps `rec` itself, not a copy, until it is written: hand over a record you will not
        mutate any more, and build a new one for the next state of the episode. A later record with the
        same id replaces a queued one.

        Raises:
            RuntimeError: the store was stopped.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is stopped; trajectory {rec.id!r} cannot be recorded")
            self._seq += 1
            self._refused.pop(rec.id, None)  # superseded: the new version is what must be written
            queued = self._queue.get(rec.id)
            if queued is None:
                self._queue[rec.id] = _Pending(rec, self._seq)
            else:
                self._queue[rec.id] = _Pending(rec, queued.seq, list(queued.waiters))
            batch_ready = len(self._queue) >= self._batch_size
        if batch_ready and self._last_error is None:
            self._wake.set()

    async def flush(self) -> None:
        """Return once every record queued before this call is committed.

        While the database is down this waits until it is back; bound it with `asyncio.timeout()`.

        Raises:
            StoreUnavailable: the store stopped before it could write them.
            RuntimeError: the store is not running.
        """
        loop = asyncio.get_running_loop()
        waiter = _Waiter(0, loop, loop.create_future())
        with self._lock:
            waiter.seq = self._seq
            if self._low_water() > waiter.seq:
                return
            if not self._running:
                raise RuntimeError(f"{self!r} is not running; start() it before flush()")
            self._waiters.append(waiter)
        self._wake.set()
        try:
            await waiter.future
        finally:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def committed(self, trajectory_id: str) -> None:
        """Return once the newest version of `trajectory_id` is committed (at once if it is already).

        This is the group commit behind every acknowledgement: the caller's record rides in the writer's
        next batch with everyone else's, and all their waiters are released after that one transaction.
        A version the database refused before is queued again and written again: a retried
        acknowledgement retries the write, it never passes for a commit. While the database is down this
        waits until it is back; bound it with `asyncio.timeout()`.

        Raises:
            StoreRefused: the database refused the record for its content (again).
            StoreUnavailable: the store stopped before the record could be written.
        """
        loop = asyncio.get_running_loop()
        waiter = _Waiter(0, loop, loop.create_future())
        with self._lock:
            pending = self._queue.get(trajectory_id)
            if pending is None:
                refused = self._refused.pop(trajectory_id, None)
                if refused is None:
                    return
                self._seq += 1
                pending = self._queue[trajectory_id] = _Pending(refused.record, self._seq)
            if not self._running:
                raise StoreUnavailable(f"{self!r} is not running: trajectory {trajectory_id!r} is unwritten")
            pending.waiters.append(waiter)
        self._commit_soon(loop)
        try:
            await waiter.future
        finally:
            with self._lock:
                pending = self._queue.get(trajectory_id)
                if pending is not None and waiter in pending.waiters:
                    pending.waiters.remove(waiter)

    def _commit_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have the queue committed: by this loop at the end of its iteration when it may (see the module
        docstring), else by the writer thread."""
        if self._loop_link is None or loop is not self._loop or self._last_error is not None:
            self._wake.set()
        elif not self._loop_commit_due:
            self._loop_commit_due = True
            loop.call_soon(self._commit_on_loop)

    def _commit_on_loop(self) -> None:
        """Upsert what is queued on the loop's own SQLite connection; anything in the way (the thread
        writing, a lock held by another process, an error) leaves it to the writer thread."""
        self._loop_commit_due = False
        link = self._loop_link
        if link is None or not self._write_lock.acquire(blocking=False):
            self._wake.set()
            return
        try:
            with self._lock:
                batch = list(itertools.islice(self._queue.values(), self._batch_size))
            if not batch:
                return
            if sum(_text_chars(entry.record) for entry in batch) > _LOOP_COMMIT_MAX_CHARS:
                self._wake.set()  # megabytes of transcript: the thread serializes and writes them
                return
            try:
                link.upsert([entry.record for entry in batch])
            except Exception:  # the thread writes it again, sorting outages from refused rows
                self._wake.set()
                return
            self._loop_commits += 1
            if self._loop_commits % _CHECKPOINT_EVERY == 0:
                self._wake.set()  # the thread checkpoints the WAL before it grows past a few MB
            self._settle(batch, written=True)
        finally:
            self._write_lock.release()

    def forget(self, trajectory_id: str) -> None:
        """Drop the refused record of `trajectory_id`, if any: nobody will ask for it again (the session
        manager calls this when the id's tombstone ends, after which the id answers 404)."""
        with self._lock:
            self._refused.pop(trajectory_id, None)

    async def get(self, trajectory_id: str, tenant: str | None = None) -> TrajectoryRecord | None:
        """The newest record with this id: the queued one if not yet written, else the stored one.

        With a `tenant`, another tenant's record is None, as an unknown id is (ids must not leak).
        """
        with self._lock:
            queued = self._queue.get(trajectory_id)
        if queued is not None:
            return queued.record if tenant is None or queued.record.tenant == tenant else None
        query = partial(repository.get_trajectory, trajectory_id=trajectory_id, tenant=tenant)
        return await self._call(query)

    def _low_water(self) -> float:
        """The smallest enqueue number not yet written (infinity when nothing is pending); hold the lock."""
        first = next(iter(self._queue.values()), None)
        return math.inf if first is None else first.seq

    def _run(self) -> None:
        engine = write_engine(self._url)
        link = WriteLink(engine)
        backoff = 0.0  # seconds until the next retry while the database is down; 0 when healthy
        checkpointed = 0  # the loop's commit count at the last checkpoint
        try:
            while True:
                if not self._stopping.is_set():
                    self._wake.wait(backoff or self._flush_interval_s)
                elif backoff:  # draining for stop() against a dead database: retry until the deadline
                    remaining = self._drain_deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wake.wait(min(backoff, remaining))
                self._wake.clear()
                if self._drain(link):
                    backoff = 0.0
                    if self._loop_commits - checkpointed >= _CHECKPOINT_EVERY:
                        checkpointed = self._loop_commits
                        self._checkpoint(link)
                    if self._stopping.is_set() and not self._queue:
                        break
                else:
                    backoff = min(max(2 * backoff, self._flush_interval_s), self._max_backoff_s)
        except BaseException as exc:  # a bug, not an outage: say so loudly instead of dying silently
            self._last_error = f"writer thread crashed: {describe_error(exc)}"
            log.exception("trajectory writer thread crashed")
            raise
        finally:
            link.close()
            engine.dispose()
            self._release_waiters()

    def _checkpoint(self, link: WriteLink) -> None:
        """The WAL checkpoint the loop's commits leave to this thread; a failure costs a longer WAL only.

        First without the write lock, so the loop goes on committing while the pages are copied and the
        files synced (a loop commit that finds the lock taken hands its rows to this thread: a wake-up
        each way, and the acknowledgement waits out the fsyncs). SQLite starts the WAL from its beginning
        again only after a checkpoint copied all of it and before any commit landed after it, which the
        loop's commits during that checkpoint prevent: its own count of copied pages cannot show them (they
        came after it read the WAL's length), so it also looks at the loop's commit count (measured: the
        WAL at 104 MB after 20 s of one client, a one-row commit about 15 % dearer than with a WAL kept
        short). So once the WAL is past `_WAL_RESET_PAGES` and that pass left some of it behind or was
        overtaken, a second copies the rest under the lock, where no commit can land, and the next commit
        starts the WAL from its beginning."""
        try:
            commits = self._loop_commits
            total, copied = link.checkpoint()
            if total > _WAL_RESET_PAGES and (copied < total or self._loop_commits != commits):
                with self._write_lock:
                    link.checkpoint()
        except SQLAlchemyError as exc:
            log.warning("trajectory database: WAL checkpoint failed: %s", describe_error(exc))

    def _drain(self, link: WriteLink) -> bool:
        """Write every queued batch; False when the database went away (the rest stays queued)."""
        while True:
            with self._write_lock:
                with self._lock:
                    batch = list(itertools.islice(self._queue.values(), self._batch_size))
                if not batch:
                    return True
                if not self._write(link, batch):
                    return False

    def _write(self, link: WriteLink, batch: builtins.list[_Pending]) -> bool:
        try:
            link.upsert([entry.record for entry in batch])
        except Exception as exc:
            if is_outage(exc):
                if self._last_error is None:
                    log.warning(
                        "trajectory database down, %d rows kept queued: %s", self.pending, describe_error(exc)
                    )
                self._last_error = describe_error(exc)
                return False
            if len(batch) > 1:  # find the offending record(s); the others go through
                return all(self._write(link, [entry]) for entry in batch)
            log.error(
                "trajectory %r rejected by the database, skipped: %s", batch[0].record.id, describe_error(exc)
            )
            self._settle(batch, written=False, error=describe_error(exc))
            return True
        if self._last_error is not None:
            log.warning("trajectory database back; %d rows still queued", self.pending - len(batch))
            self._last_error = None
        self._settle(batch, written=True)
        return True

    def _settle(self, batch: builtins.list[_Pending], *, written: bool, error: str | None = None) -> None:
        """Forget the committed (or rejected) entries unless re-recorded meanwhile; wake their waiters."""
        with self._lock:
            for entry in batch:
                if self._queue.get(entry.record.id) is entry:
                    del self._queue[entry.record.id]
                    if not written:
                        self._refused[entry.record.id] = _Refused(entry.record, error or "")
                    else:
                        self._refused.pop(entry.record.id, None)
            low_water = self._low_water()
            ready = [waiter for waiter in self._waiters if waiter.seq < low_water]
            self._waiters = [waiter for waiter in self._waiters if waiter.seq >= low_water]
            committed = [waiter for entry in batch for waiter in entry.waiters]
        if written:
            self._written += len(batch)
        else:
            self._dropped += len(batch)
        refused = None
        if not written:
            refused = StoreRefused(f"the database refused trajectory {batch[0].record.id!r}: {error}")
        self._resolve([(waiter, None) for waiter in ready] + [(waiter, refused) for waiter in committed])

    def _release_waiters(self) -> None:
        """On thread exit: fail the flush() callers whose records could not be written."""
        with self._lock:
            self._running = False
            waiters, self._waiters = self._waiters, []
            waiters += [waiter for entry in self._queue.values() for waiter in entry.waiters]
            left = len(self._queue)
        if left:
            log.error("trajectory writer stopped with %d trajectories unwritten: %s", left, self._last_error)
        error = StoreUnavailable(f"the store stopped with {left} trajectories unwritten: {self._last_error}")
        self._resolve([(waiter, error) for waiter in waiters])

    @staticmethod
    def _resolve(outcomes: builtins.list[tuple[_Waiter, BaseException | None]]) -> None:
        """Settle the waiters' futures on their loops: one wake-up per loop for a batch, not one each, and
        none for the loop this runs on (its own commit)."""
        by_loop: dict[asyncio.AbstractEventLoop, builtins.list[_Outcome]] = {}
        for waiter, error in outcomes:
            by_loop.setdefault(waiter.loop, []).append((waiter.future, error))
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # the writer thread
            running = None
        for loop, settled in by_loop.items():
            if loop is running:
                _settle_futures(settled)
                continue
            with contextlib.suppress(RuntimeError):  # the waiting loop is closed; nobody is left to tell
                loop.call_soon_threadsafe(_settle_futures, settled)
