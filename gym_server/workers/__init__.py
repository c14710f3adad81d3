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

Modules: `errors` (what callers catch), `pool` (`WorkerPool`: slots, queueing, replacing), `_handle`
(starting, killing and reaping one child), `_child` (the child's loop), `_waiters` (queued callers).

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

from gym_server.workers.errors import PoolClosed, RemoteTraceback, WorkerCrashed, WorkerError, WorkerTimeout
from gym_server.workers.pool import WorkerPool

__all__ = ["PoolClosed", "RemoteTraceback", "WorkerCrashed", "WorkerError", "WorkerPool", "WorkerTimeout"]
