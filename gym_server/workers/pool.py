"""`WorkerPool`: slots for at most `size` workers, callers queued for them, replacements in the background.

See the package docstring (`gym_server.workers`) for the design.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import pickle
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Literal, TypeVar, TypeVarTuple, cast

from gym_server.workers._handle import REAP_TIMEOUT_S, Worker, spawn_worker
from gym_server.workers._waiters import CLOSED, Token, Waiter, opened
from gym_server.workers.errors import PoolClosed, RemoteTraceback, WorkerCrashed, WorkerError, WorkerTimeout

__all__ = ["WorkerPool"]

log = logging.getLogger(__name__)

R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class WorkerPool:
    """A bounded pool of killable worker processes; see the package docstring for the design.

    Args:
        size: the most workers (and so concurrent calls) at once.
        context: `forkserver` (fast restarts, the default) or `spawn`.
        preload: modules each worker (and the fork server, best effort) imports before its first call.
        initializer: a module-level function each worker runs once after the imports, to warm caches.
        memory_limit_bytes: an address-space limit per worker (`RLIMIT_AS`), or None.
        max_calls_per_worker: recycle a worker after this many calls, bounding cache growth; None: never.
        start_timeout_s: how long a new worker may take to report ready.
        name: shown in process titles and reprs.
    """

    def __init__(
        self,
        size: int = 2,
        *,
        context: Literal["forkserver", "spawn"] = "forkserver",
        preload: Sequence[str] = (),
        initializer: Callable[[], object] | None = None,
        memory_limit_bytes: int | None = None,
        max_calls_per_worker: int | None = None,
        start_timeout_s: float = 60.0,
        name: str = "gym-worker",
    ) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.size = size
        self.name = name
        self._ctx: ForkServerContext | SpawnContext
        if context == "forkserver":
            self._ctx = multiprocessing.get_context("forkserver")
            if preload:
                self._ctx.set_forkserver_preload(list(preload))
        else:
            self._ctx = multiprocessing.get_context("spawn")
        self._preload = tuple(preload)
        self._initializer = initializer
        self._memory_limit = memory_limit_bytes
        self._max_calls = max_calls_per_worker
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._workers: set[Worker] = set()  # started and not yet reaped
        self._idle: list[Worker] = []  # the free subset of _workers
        self._slots = 0  # workers alive, starting, or promised to a caller; never above size
        self._waiters: deque[Waiter] = deque()
        self._threads: set[threading.Thread] = set()  # replacements in flight
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._idle)} idle of {len(self._workers)}"
        return f"WorkerPool(name={self.name!r}, size={self.size}, {state})"

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and diagnostics)."""
        with self._lock:
            return sorted(worker.pid for worker in self._workers)

    def start(self) -> None:
        """Start every worker now instead of on first use (blocking: call it at start-up or in a thread)."""
        while True:
            with self._lock:
                if self._closed or self._slots >= self.size:
                    return
                self._slots += 1
            self._release(self._start_worker())

    # -- calling -------------------------------------------------------------------------------------

    async def run(self, fn: Callable[[*Ts], R], *args: *Ts, timeout_s: float) -> R:
        """Run `fn(*args)` in a worker without blocking the event loop.

        Raises:
            WorkerTimeout: the call ran past `timeout_s` (the worker was killed).
            WorkerCrashed: the worker died.
            PoolClosed: the pool is or was closed.
        """
        request = _pack(fn, args)
        worker = await self._acquire_async()
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = worker.conn.fileno()
        with self._killed_on_failure(worker, fn, timeout_s):
            worker.conn.send_bytes(request)
            loop.add_reader(fd, _resolve, readable)
            try:
                async with asyncio.timeout(timeout_s):
                    await readable
            finally:
                loop.remove_reader(fd)
            reply = worker.conn.recv_bytes()
        return cast(R, self._finish(worker, reply))

    def run_sync(self, fn: Callable[[*Ts], R], *args: *Ts, timeout_s: float) -> R:
        """Run `fn(*args)` in a worker, blocking the calling thread (any thread); raises as `run`."""
        request = _pack(fn, args)
        worker = self._acquire_sync()
        with self._killed_on_failure(worker, fn, timeout_s):
            worker.conn.send_bytes(request)
            if not worker.conn.poll(timeout_s):
                raise TimeoutError
            reply = worker.conn.recv_bytes()
        return cast(R, self._finish(worker, reply))

    def _finish(self, worker: Worker, reply: bytes) -> object:
        worker.calls += 1
        self._release(worker)
        try:
            ok, value, remote_traceback = pickle.loads(reply)
        except Exception as exc:
            raise WorkerError(
                f"the worker's reply could not be unpickled: {type(exc).__name__}: {exc}"
            ) from exc
        if ok:
            return value
        if remote_traceback:
            value.__cause__ = RemoteTraceback(remote_traceback)
        raise value

    @contextlib.contextmanager
    def _killed_on_failure(
        self, worker: Worker, fn: Callable[..., object], timeout_s: float
    ) -> Iterator[None]:
        """Around one call's exchange with `worker`: if it does not finish cleanly, the worker is killed
        and replaced, and the caller sees the pool's error for what happened."""
        try:
            yield
        except BaseException as exc:
            error = self._failed(worker, exc, fn, timeout_s)
            if error is exc:
                raise
            raise error from exc

    def _failed(
        self, worker: Worker, exc: BaseException, fn: Callable[..., object], timeout_s: float
    ) -> BaseException:
        """Kill and replace a worker whose call did not finish cleanly; return what the caller raises."""
        worker.signal_kill()
        self._replace_later(worker)
        label = getattr(fn, "__qualname__", repr(fn))
        if self._closed:
            return PoolClosed(f"the pool closed while {label} was running")
        if isinstance(exc, TimeoutError):
            return WorkerTimeout(f"{label} ran past {timeout_s:g} s; worker {worker.pid} was killed")
        if isinstance(exc, (EOFError, OSError)):
            return WorkerCrashed(f"worker {worker.pid} died while running {label}: {type(exc).__name__}")
        return exc  # cancellation or an interrupt: re-raised as is, the worker is already gone

    # -- acquiring and releasing -----------------------------------------------------------------------

    def _claim(self, loop: asyncio.AbstractEventLoop | None) -> Worker | Waiter | None:
        """Under the lock: an idle worker, a queued waiter, or None for a granted slot."""
        with self._lock:
            if self._closed:
                raise PoolClosed(f"{self!r} is closed")
            if self._idle:
                return self._idle.pop()
            if self._slots < self.size:
                self._slots += 1
                return None
            waiter = Waiter(loop, self._hand_back)
            self._waiters.append(waiter)
            return waiter

    def _acquire_sync(self) -> Worker:
        claim = self._claim(None)
        if isinstance(claim, Waiter):
            try:
                claim.event.wait()
            except BaseException:  # an interrupt while queued: leave the queue, return what arrived
                with self._lock, contextlib.suppress(ValueError):
                    self._waiters.remove(claim)
                if claim.event.is_set():
                    self._hand_back(claim.token)
                raise
            claim = opened(claim.token)
        return claim if claim is not None else self._start_worker()

    async def _acquire_async(self) -> Worker:
        claim = self._claim(asyncio.get_running_loop())
        if isinstance(claim, Waiter):
            assert claim.future is not None
            try:
                token = await claim.future
            except asyncio.CancelledError:
                with self._lock, contextlib.suppress(ValueError):
                    self._waiters.remove(claim)
                if claim.future.done() and not claim.future.cancelled():
                    self._hand_back(claim.future.result())  # delivered just before the cancel
                raise
            claim = opened(token)
        if claim is not None:
            return claim
        starting = asyncio.ensure_future(asyncio.to_thread(self._start_worker))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(self._adopt)
            raise

    def _adopt(self, starting: asyncio.Future[Worker]) -> None:
        """A worker started for a caller that was cancelled meanwhile joins the pool."""
        if not starting.cancelled() and starting.exception() is None:
            self._release(starting.result())

    def _hand_back(self, token: Token) -> None:
        """Take back a token its waiter no longer wants: a worker to the pool, a slot to the next waiter."""
        if isinstance(token, Worker):
            self._release(token)
        elif token is None:
            self._free_slot()

    def _release(self, worker: Worker) -> None:
        """Return a healthy worker: to the oldest waiter, else to the idle list; retire it if worn out."""
        if self._max_calls is not None and worker.calls >= self._max_calls:
            self._replace_later(worker)
            return
        with self._lock:
            if not self._closed:
                while self._waiters:
                    if self._waiters.popleft().deliver(worker):
                        return
                self._idle.append(worker)
                return
        worker.reap()

    def _free_slot(self) -> None:
        """A slot whose worker is gone: hand it to a waiter (who starts a worker) or give it up."""
        with self._lock:
            while self._waiters:
                if self._waiters.popleft().deliver(None):
                    return
            self._slots -= 1

    def _start_worker(self) -> Worker:
        """Start a worker in the caller's slot and wait until it is ready; frees the slot on failure."""
        try:
            worker = spawn_worker(
                self._ctx,
                name=self.name,
                preload=self._preload,
                initializer=self._initializer,
                memory_limit_bytes=self._memory_limit,
                start_timeout_s=self._start_timeout_s,
            )
        except BaseException:
            self._free_slot()
            raise
        with self._lock:
            if not self._closed:
                self._workers.add(worker)
                return worker
        worker.reap()
        raise PoolClosed(f"{self!r} closed while a worker was starting")

    def _replace_later(self, worker: Worker) -> None:
        """Reap a worker and start its replacement in a background thread; the slot stays reserved."""
        with self._lock:
            self._workers.discard(worker)
            thread = threading.Thread(
                target=self._replace, args=(worker,), name=f"{self.name}-replace", daemon=True
            )
            self._threads.add(thread)
        thread.start()

    def _replace(self, worker: Worker) -> None:
        try:
            worker.reap()
            if self._closed:
                return
            try:
                self._release(self._start_worker())
            except PoolClosed:
                pass
            except Exception:
                log.exception("%s: could not start a replacement worker", self.name)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    # -- shutting down -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill and join every worker and wake queued callers with `PoolClosed`; idempotent."""
        with self._lock:
            self._closed = True
            workers, idle = list(self._workers), list(self._idle)
            waiters, threads = list(self._waiters), list(self._threads)
            self._workers.clear()
            self._idle.clear()
            self._waiters.clear()
        for waiter in waiters:
            waiter.deliver(CLOSED)
        for worker in workers:
            worker.signal_kill()
        for worker in workers:
            if worker in idle:
                worker.reap()
            else:  # busy: its caller owns the pipe and closes it; joining here is still safe
                with contextlib.suppress(ValueError, AssertionError):
                    worker.process.join(REAP_TIMEOUT_S)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(REAP_TIMEOUT_S)


def _pack(fn: Callable[..., object], args: tuple[object, ...]) -> bytes:
    return pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
