"""A killable process worker pool for blocking, possibly pathological work (math parsing, sympy).

Why not a thread or `ProcessPoolExecutor`: math-verify's own timeouts use `signal.alarm`, which only works
on the main thread, and a sympy evaluation of `9^9^9^9` spins inside C code where no Python-level timeout
can interrupt it. The only reliable stop is to kill the process doing the work. `ProcessPoolExecutor`
cannot kill one worker (a dead worker breaks the whole executor), so this module keeps its own small pool.

Design:

- **Processes.** Each worker is a child started from the `forkserver` context (or `spawn`), never a plain
  `fork` of the threaded, event-looped server. Modules named in `preload` are imported by the fork server
  once (best effort: the fork server is process-wide and only honours the preload list given before it
  starts) and again in each child, so a replacement worker forks ready-made in milliseconds instead of
  re-importing sympy. An optional `initializer` runs in each child before it reports ready (warm caches).
  Each child leads its own process group, ignores SIGINT (the parent decides), and may have an
  address-space limit, so a runaway allocation fails with `MemoryError` instead of swapping the host.
  An idle child exits when its pipe reaches EOF; under `forkserver` a busy one also dies with the fork
  server (which exits with the server) through Linux's `PR_SET_PDEATHSIG`. Not under `spawn`: there the
  parent is whichever server thread started the child, and that signal fires when the *thread* exits.
- **Calls.** One duplex pipe per worker carries a pickled `(fn, args)` down and `(ok, value, traceback)`
  back; `fn` must be importable by the child (a module-level function). Arguments are pickled before a
  worker is taken, so an unpicklable argument never costs a worker. A call's `timeout_s` is wall-clock from
  the moment it reaches its worker; time spent queueing for a free worker is not counted.
- **Failure.** On timeout the worker's whole process group gets SIGKILL before `WorkerTimeout` is raised;
  a worker that dies mid-call raises `WorkerCrashed`; either way a background thread reaps the corpse and
  starts a replacement, so the pool stays warm. An exception raised by `fn` is re-raised in the caller with
  the child's traceback chained as its cause, and the worker is kept.
- **Concurrency.** At most `size` workers exist, so at most `size` calls run at once. Workers start lazily,
  one per waiting caller up to `size`, and are reused across calls. A caller finding none free queues; a
  released worker is handed straight to the oldest queued caller, sync or async.
- **Async without blocking.** `await pool.run(fn, *args, timeout_s=...)` sends the call, then waits for the
  pipe to become readable with `loop.add_reader` (no thread hop, hence sub-millisecond overhead); starting
  and reaping workers happen in threads. A cancelled caller's worker is killed and replaced, since its
  half-finished call would otherwise answer the next one. `run_sync` is the same call for CLIs, tests and
  non-loop threads.
- **Shutdown.** `close()` is idempotent: it wakes queued callers with `PoolClosed`, SIGKILLs every worker
  (busy ones too; their callers get `PoolClosed`) and joins them, so no zombie remains. With `forkserver`
  the fork server itself stays up for the life of the process, as multiprocessing intends.

Example:
    ```python
    pool = WorkerPool(size=2, preload=("sympy",))
    try:
        value = await pool.run(slow_function, 3, timeout_s=2.0)
    except WorkerTimeout:
        value = None
    finally:
        pool.close()
    ```
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import logging
import multiprocessing
import os
import pickle
import resource
import signal
import threading
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Literal, TypeAlias, TypeVar, TypeVarTuple, cast

__all__ = ["PoolClosed", "RemoteTraceback", "WorkerCrashed", "WorkerError", "WorkerPool", "WorkerTimeout"]

log = logging.getLogger(__name__)

R = TypeVar("R")
Ts = TypeVarTuple("Ts")

_READY = b"ready"
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_REAP_TIMEOUT_S = 5.0


class WorkerError(Exception):
    """Base of the pool's own errors (never raised for an exception inside the called function)."""


class WorkerTimeout(WorkerError):
    """The call ran past its `timeout_s`; its worker was killed and is being replaced."""


class WorkerCrashed(WorkerError):
    """The worker died mid-call (a segfault, `os._exit`, an OOM kill) or could not start."""


class PoolClosed(WorkerError):
    """The pool was closed before or during the call."""


class RemoteTraceback(Exception):
    """The child's formatted traceback, chained as `__cause__` of an exception re-raised in the parent."""

    def __str__(self) -> str:
        return str(self.args[0])


# -- the child side ------------------------------------------------------------------------------------


def _serve(
    conn: Connection,
    preload: tuple[str, ...],
    initializer: Callable[[], object] | None,
    memory_limit_bytes: int | None,
    die_with_parent: bool,
) -> None:
    """A worker's main loop: run pickled calls until the parent closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setpgid(0, 0)  # its own group, so a kill takes any grandchildren with it
    if die_with_parent:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if memory_limit_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    for module in preload:
        importlib.import_module(module)
    if initializer is not None:
        initializer()
    conn.send_bytes(_READY)
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):
            return
        conn.send_bytes(_execute(request))


def _execute(request: bytes) -> bytes:
    """Run one pickled call and pickle its outcome; nothing the call does can break the protocol."""
    try:
        fn, args = pickle.loads(request)
        reply: tuple[bool, object, str] = (True, fn(*args), "")
    except Exception as exc:
        reply = (False, exc, traceback.format_exc())
    try:
        return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an unpicklable result or exception still gets an answer
        failure = WorkerError(f"the worker's reply could not be pickled: {type(exc).__name__}: {exc}")
        return pickle.dumps((False, failure, reply[2]), protocol=pickle.HIGHEST_PROTOCOL)


# -- the parent side -----------------------------------------------------------------------------------


class _Worker:
    """One child process and the parent's end of its pipe."""

    __slots__ = ("calls", "conn", "pid", "process")

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.pid = cast(int, process.pid)
        self.calls = 0

    def __repr__(self) -> str:
        return f"_Worker(pid={self.pid}, calls={self.calls})"

    def signal_kill(self) -> None:
        """SIGKILL the worker's process group now; cheap, safe from any thread, reaping comes later."""
        if self.process.exitcode is not None:
            return  # already reaped: its pid may belong to someone else by now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ValueError, OSError):
            self.process.kill()

    def reap(self) -> None:
        """Kill, join and release the worker's resources; idempotent."""
        self.signal_kill()
        with contextlib.suppress(ValueError, AssertionError):
            self.process.join(_REAP_TIMEOUT_S)
        self.conn.close()


class _Closed:
    """The token a queued caller receives when the pool closes."""


_CLOSED = _Closed()
_Token: TypeAlias = "_Worker | _Closed | None"  # None: a free slot, start your own worker


class _Waiter:
    """A caller queued for a worker: a thread blocked on an event, or a coroutine awaiting a future."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        self.future: asyncio.Future[_Token] | None = loop.create_future() if loop is not None else None
        self.event = threading.Event()
        self.token: _Token = None

    def deliver(self, token: _Token, pool: WorkerPool) -> bool:
        """Hand the token over; False when the waiter is gone (its loop closed)."""
        if self.loop is None:
            self.token = token
            self.event.set()
            return True
        try:
            self.loop.call_soon_threadsafe(self._settle, token, pool)
        except RuntimeError:
            return False
        return True

    def _settle(self, token: _Token, pool: WorkerPool) -> None:
        assert self.future is not None
        if not self.future.done():
            self.future.set_result(token)
        else:  # the caller was cancelled meanwhile
            self.hand_back(token, pool)

    @staticmethod
    def hand_back(token: _Token, pool: WorkerPool) -> None:
        """Return a token its waiter no longer wants: a worker to the pool, a slot to the next waiter."""
        if isinstance(token, _Worker):
            pool._release(token)
        elif token is None:
            pool._free_slot()


class WorkerPool:
    """A bounded pool of killable worker processes; see the module docstring for the design.

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
        self._workers: set[_Worker] = set()  # started and not yet reaped
        self._idle: list[_Worker] = []  # the free subset of _workers
        self._slots = 0  # workers alive, starting, or promised to a caller; never above size
        self._waiters: deque[_Waiter] = deque()
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
        try:
            worker.conn.send_bytes(request)
            loop.add_reader(fd, _resolve, readable)
            try:
                async with asyncio.timeout(timeout_s):
                    await readable
            finally:
                loop.remove_reader(fd)
            reply = worker.conn.recv_bytes()
        except BaseException as exc:
            error = self._failed(worker, exc, fn, timeout_s)
            if error is exc:
                raise
            raise error from exc
        return cast(R, self._finish(worker, reply))

    def run_sync(self, fn: Callable[[*Ts], R], *args: *Ts, timeout_s: float) -> R:
        """Run `fn(*args)` in a worker, blocking the calling thread (any thread); raises as `run`."""
        request = _pack(fn, args)
        worker = self._acquire_sync()
        try:
            worker.conn.send_bytes(request)
            if not worker.conn.poll(timeout_s):
                raise TimeoutError
            reply = worker.conn.recv_bytes()
        except BaseException as exc:
            error = self._failed(worker, exc, fn, timeout_s)
            if error is exc:
                raise
            raise error from exc
        return cast(R, self._finish(worker, reply))

    def _finish(self, worker: _Worker, reply: bytes) -> object:
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

    def _failed(
        self, worker: _Worker, exc: BaseException, fn: Callable[..., object], timeout_s: float
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

    def _claim(self, loop: asyncio.AbstractEventLoop | None) -> _Worker | _Waiter | None:
        """Under the lock: an idle worker, a queued waiter, or None for a granted slot."""
        with self._lock:
            if self._closed:
                raise PoolClosed(f"{self!r} is closed")
            if self._idle:
                return self._idle.pop()
            if self._slots < self.size:
                self._slots += 1
                return None
            waiter = _Waiter(loop)
            self._waiters.append(waiter)
            return waiter

    def _acquire_sync(self) -> _Worker:
        claim = self._claim(None)
        if isinstance(claim, _Waiter):
            try:
                claim.event.wait()
            except BaseException:  # an interrupt while queued: leave the queue, return what arrived
                with self._lock, contextlib.suppress(ValueError):
                    self._waiters.remove(claim)
                if claim.event.is_set():
                    claim.hand_back(claim.token, self)
                raise
            claim = _opened(claim.token)
        return claim if claim is not None else self._start_worker()

    async def _acquire_async(self) -> _Worker:
        claim = self._claim(asyncio.get_running_loop())
        if isinstance(claim, _Waiter):
            assert claim.future is not None
            try:
                token = await claim.future
            except asyncio.CancelledError:
                with self._lock, contextlib.suppress(ValueError):
                    self._waiters.remove(claim)
                if claim.future.done() and not claim.future.cancelled():
                    claim.hand_back(claim.future.result(), self)  # delivered just before the cancel
                raise
            claim = _opened(token)
        if claim is not None:
            return claim
        starting = asyncio.ensure_future(asyncio.to_thread(self._start_worker))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(self._adopt)
            raise

    def _adopt(self, starting: asyncio.Future[_Worker]) -> None:
        """A worker started for a caller that was cancelled meanwhile joins the pool."""
        if not starting.cancelled() and starting.exception() is None:
            self._release(starting.result())

    def _release(self, worker: _Worker) -> None:
        """Return a healthy worker: to the oldest waiter, else to the idle list; retire it if worn out."""
        if self._max_calls is not None and worker.calls >= self._max_calls:
            self._replace_later(worker)
            return
        with self._lock:
            if not self._closed:
                while self._waiters:
                    if self._waiters.popleft().deliver(worker, self):
                        return
                self._idle.append(worker)
                return
        worker.reap()

    def _free_slot(self) -> None:
        """A slot whose worker is gone: hand it to a waiter (who starts a worker) or give it up."""
        with self._lock:
            while self._waiters:
                if self._waiters.popleft().deliver(None, self):
                    return
            self._slots -= 1

    def _start_worker(self) -> _Worker:
        """Start a worker in the caller's slot and wait until it is ready; frees the slot on failure."""
        try:
            worker = self._spawn()
        except BaseException:
            self._free_slot()
            raise
        with self._lock:
            if not self._closed:
                self._workers.add(worker)
                return worker
        worker.reap()
        raise PoolClosed(f"{self!r} closed while a worker was starting")

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_serve,
            args=(
                child_conn,
                self._preload,
                self._initializer,
                self._memory_limit,
                isinstance(self._ctx, ForkServerContext),
            ),
            name=f"{self.name}-worker",
            daemon=True,
        )
        try:
            process.start()
        except Exception as exc:  # out of pids or fds, or started from a daemonic process
            parent_conn.close()
            raise WorkerCrashed(f"could not start a worker: {type(exc).__name__}: {exc}") from exc
        finally:
            child_conn.close()
        worker = _Worker(process, parent_conn)
        try:
            if not parent_conn.poll(self._start_timeout_s):
                raise WorkerCrashed(f"worker {worker.pid} did not start within {self._start_timeout_s:g} s")
            if parent_conn.recv_bytes() != _READY:
                raise WorkerCrashed(f"worker {worker.pid} sent a bad handshake")
        except (EOFError, OSError) as exc:
            worker.reap()
            raise WorkerCrashed(
                f"worker {worker.pid} died while starting (exit code {process.exitcode})"
            ) from exc
        except BaseException:
            worker.reap()
            raise
        return worker

    def _replace_later(self, worker: _Worker) -> None:
        """Reap a worker and start its replacement in a background thread; the slot stays reserved."""
        with self._lock:
            self._workers.discard(worker)
            thread = threading.Thread(
                target=self._replace, args=(worker,), name=f"{self.name}-replace", daemon=True
            )
            self._threads.add(thread)
        thread.start()

    def _replace(self, worker: _Worker) -> None:
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
            waiter.deliver(_CLOSED, self)
        for worker in workers:
            worker.signal_kill()
        for worker in workers:
            if worker in idle:
                worker.reap()
            else:  # busy: its caller owns the pipe and closes it; joining here is still safe
                with contextlib.suppress(ValueError, AssertionError):
                    worker.process.join(_REAP_TIMEOUT_S)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(_REAP_TIMEOUT_S)


def _pack(fn: Callable[..., object], args: tuple[object, ...]) -> bytes:
    return pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _opened(token: _Token) -> _Worker | None:
    if isinstance(token, _Closed):
        raise PoolClosed("the pool closed while the call was queued")
    return token
