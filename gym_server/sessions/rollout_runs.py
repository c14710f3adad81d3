"""The server-driven rollout runs of this process: started, watched, remembered for a while, cancelled
at shutdown.

A run is an asyncio task playing episodes through the session manager; its trajectories go to the store
as each episode closes, so nothing here is the record of a run. What this board keeps is the progress
view `GET /v1/rollouts/runs/{id}` answers. Two bounds keep a long-lived server from growing with every
run: at most `max_running` runs play at once (one more is refused with 429), and only the newest
`keep_finished` finished runs are remembered, each reduced to its final view (the episodes' token data,
already stored, is dropped).

Two more keep runs from crowding out the clients who play their own sessions: a run plays at most
`max_concurrency` episodes at once, and all runs together hold at most `session_share` of the server's
`max_sessions` (the board's `session_slots`, taken per session, first come first served, so runs share
them in turn). Beyond that a run's episodes wait for a slot instead of failing; direct clients always
keep the rest of `max_sessions`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from gym_server.core.errors import AtCapacity
from gym_server.core.settings import RolloutRunSettings
from gym_server.store.records import DEFAULT_TENANT
from gym_trainer.driver import Rollout, summarize

__all__ = ["RolloutRun", "RolloutRunBoard", "RunStatus"]

log = logging.getLogger(__name__)

RunStatus = Literal["running", "completed", "failed", "cancelled"]

# How long shutdown waits for cancelled runs to close their sessions before the manager closes the rest.
_SHUTDOWN_GRACE_S = 10.0


@dataclass(eq=False)
class RolloutRun:
    """One run: its progress while it plays (the job itself, not its episodes, has the status)."""

    id: str
    run: str
    episodes: int
    concurrency: int = 1
    tenant: str = DEFAULT_TENANT
    status: RunStatus = "running"
    rollouts: list[Rollout] = field(default_factory=list)
    error: str | None = None

    def view(self) -> dict[str, Any]:
        return {
            "run_id": self.id,
            "run": self.run,
            "status": self.status,
            "episodes": self.episodes,
            "concurrency": self.concurrency,
            "finished": len(self.rollouts),
            "error": self.error,
            "summary": summarize(self.rollouts) if self.rollouts else None,
            "rollout_ids": [r.session_id for r in self.rollouts if r.session_id],
        }


class RolloutRunBoard:
    """Plays runs as background tasks within the bounds of `RolloutRunSettings`."""

    def __init__(self, settings: RolloutRunSettings, retry_after_s: int, max_sessions: int) -> None:
        self.settings = settings
        self.retry_after_s = retry_after_s
        # The sessions all runs together may hold; asyncio's semaphore wakes its waiters in order.
        self.session_slots = asyncio.Semaphore(max(1, int(settings.session_share * max_sessions)))
        self._running: dict[str, tuple[RolloutRun, asyncio.Task[None]]] = {}
        self._finished: OrderedDict[str, tuple[str, dict[str, Any]]] = OrderedDict()  # id -> (tenant, view)

    def __repr__(self) -> str:
        return f"RolloutRunBoard(running={len(self._running)}, remembered={len(self._finished)})"

    @property
    def running(self) -> int:
        return len(self._running)

    def start(
        self, job: RolloutRun, play: Callable[[RolloutRun], Coroutine[Any, Any, None]]
    ) -> asyncio.Task[None]:
        """Play `play(job)` in the background; refused with 429 while `max_running` runs are playing."""
        limit = self.settings.max_running
        if len(self._running) >= limit:
            raise AtCapacity(limit, self.retry_after_s, what="rollout runs playing")
        task = asyncio.create_task(self._play(job, play), name=f"rollout-run-{job.id}")
        self._running[job.id] = (job, task)
        return task

    def view(self, run_id: str, tenant: str | None = None) -> dict[str, Any] | None:
        """The run's progress, its final view once finished, or None when unknown or forgotten (or, with
        a `tenant`, another tenant's)."""
        running = self._running.get(run_id)
        if running is not None:
            return running[0].view() if tenant in (None, running[0].tenant) else None
        owner, view = self._finished.get(run_id, (None, None))
        return view if tenant in (None, owner) else None

    async def aclose(self) -> None:
        """Cancel the runs still playing and wait (a bounded while) for them to close their sessions."""
        tasks = [task for _, task in self._running.values()]
        for task in tasks:
            task.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=_SHUTDOWN_GRACE_S)
            if stuck:
                log.warning("%d rollout runs did not stop within %.0f s", len(stuck), _SHUTDOWN_GRACE_S)
            else:
                log.warning("server stopping: cancelled %d rollout runs", len(tasks))

    async def _play(self, job: RolloutRun, play: Callable[[RolloutRun], Coroutine[Any, Any, None]]) -> None:
        try:
            await play(job)
            job.status = "completed"
        except asyncio.CancelledError:
            job.status = "cancelled"
            raise
        except Exception as exc:  # a driver bug: the job fails, its finished episodes are stored anyway
            log.exception("rollout run %s failed", job.id)
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            self._remember(job)

    def _remember(self, job: RolloutRun) -> None:
        self._running.pop(job.id, None)
        if self.settings.keep_finished == 0:
            return
        self._finished[job.id] = (job.tenant, job.view())
        while len(self._finished) > self.settings.keep_finished:
            self._finished.popitem(last=False)
