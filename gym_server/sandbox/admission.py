"""Admission of sandboxes: one cap on how many run at once, and one memory and CPU budget they share.

Each sandbox has its own memory limit and CPU quota, but nothing bounded their sum: twelve concurrent
code verifications ran twelve sandboxes and took 3.8 GB of host memory. Every sandbox the server runs
code in is therefore admitted here first: a session's own sandbox from the session's start to its close,
a loan from the warm pool for one run. While admitted it counts against `max_running` and reserves its
`Limits.memory_mb` and `Limits.cpus` from the budget, so what running sandboxes may use together never
passes what the operator allowed, and the kernel's OOM killer never has to choose a victim.

Over the cap or the budget, a caller that may queue (verification) waits its turn, first come first
served, for at most `queue_wait_s`; one that may not (a new session) is refused at once. Either way the
refusal is `SandboxesBusy`, a 429 with Retry-After. Stateless scoring marks its whole replay as one that
may queue with `queueing()`, so the session-style sandboxes its environments reserve wait like loans do.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import os
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_server.core.errors import SandboxesBusy, SandboxUnavailable
from gym_server.core.settings import SandboxSettings
from gym_server.sandbox.cgroups import own_limits
from gym_server.sandbox.protocol import Limits

__all__ = ["Admission", "Budget", "Ticket", "host_resources", "queueing"]

_RUNNING_PER_CORE = 4  # default cap and CPU budget: sandboxes mostly wait on I/O or the model
_MEMORY_SHARE = 0.5  # default memory budget: half the host's (or the server's cgroup's) memory

_may_queue: contextvars.ContextVar[bool] = contextvars.ContextVar("gym_sandbox_may_queue", default=False)


def host_resources() -> tuple[float, int]:
    """The cores and MiB of memory this server may use: the host's, or its cgroup's where lower."""
    cores = float(len(os.sched_getaffinity(0)))
    memory_mb = 0
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mb = int(line.split()[1]) // 1024
    cgroup_cpus, cgroup_bytes = own_limits()
    if cgroup_cpus is not None:
        cores = min(cores, cgroup_cpus)
    if cgroup_bytes is not None:
        memory_mb = min(memory_mb, cgroup_bytes // (1024 * 1024)) if memory_mb else cgroup_bytes // 2**20
    return cores, memory_mb or 1024


@dataclass(frozen=True, slots=True)
class Budget:
    """What running sandboxes may hold together: how many, how much memory (MiB), how many cores of quota."""

    max_running: int
    memory_mb: int
    cpus: float

    @classmethod
    def from_settings(cls, settings: SandboxSettings) -> Budget:
        """The configured budget; what is left unset is derived from the host's cores and memory."""
        cores, memory_mb = host_resources()
        per_core = max(1, math.floor(cores * _RUNNING_PER_CORE))
        return cls(
            max_running=settings.max_running or per_core,
            memory_mb=settings.memory_budget_mb or max(1, int(memory_mb * _MEMORY_SHARE)),
            cpus=settings.cpu_budget or float(per_core),
        )


class Ticket:
    """One admitted sandbox's reservation; `release()` gives it back (idempotent)."""

    def __init__(self, admission: Admission, limits: Limits) -> None:
        self._admission = admission
        self.limits = limits
        self.released = False

    def __repr__(self) -> str:
        return f"Ticket({self.limits.memory_mb} MiB, {self.limits.cpus:g} cpus, released={self.released})"

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._admission._give_back(self.limits)


class Admission:
    """The one gate every running sandbox of a server passes; see the module docstring.

    Args:
        budget: the cap and the budget.
        queue_wait_s: how long a caller that may queue waits for room before it is refused.
        retry_after_s: the Retry-After a refusal carries.
    """

    def __init__(self, budget: Budget, *, queue_wait_s: float, retry_after_s: int) -> None:
        self.budget = budget
        self.queue_wait_s = queue_wait_s
        self.retry_after_s = retry_after_s
        self.running = 0
        self.peak = 0  # the most ever admitted at once: what tests and operators check the cap by
        self.memory_mb = 0
        self.cpus = 0.0
        self._waiters: deque[tuple[Limits, asyncio.Future[None]]] = deque()

    @classmethod
    def from_settings(cls, settings: SandboxSettings) -> Admission:
        return cls(
            Budget.from_settings(settings),
            queue_wait_s=settings.queue_wait_s,
            retry_after_s=settings.retry_after_s,
        )

    def __repr__(self) -> str:
        return f"Admission(running={self.running}/{self.budget.max_running}, waiting={len(self._waiters)})"

    def state(self) -> dict[str, Any]:
        """What readiness shows: use against the budget, the high-water mark, the queue."""
        return {
            "running": self.running,
            "peak": self.peak,
            "max_running": self.budget.max_running,
            "memory_mb": self.memory_mb,
            "memory_budget_mb": self.budget.memory_mb,
            "cpus": round(self.cpus, 3),
            "cpu_budget": self.budget.cpus,
            "waiting": len(self._waiters),
        }

    def _fits(self, limits: Limits) -> bool:
        return (
            self.running < self.budget.max_running
            and self.memory_mb + limits.memory_mb <= self.budget.memory_mb
            and self.cpus + limits.cpus <= self.budget.cpus + 1e-9
        )

    def _take(self, limits: Limits) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.memory_mb += limits.memory_mb
        self.cpus += limits.cpus

    def _give_back(self, limits: Limits) -> None:
        self.running -= 1
        self.memory_mb -= limits.memory_mb
        self.cpus = max(0.0, self.cpus - limits.cpus)
        self._wake()

    def _wake(self) -> None:
        """Admit queued callers in arrival order while the first one fits (it is never overtaken)."""
        while self._waiters:
            limits, future = self._waiters[0]
            if future.done():  # gave up meanwhile
                self._waiters.popleft()
                continue
            if not self._fits(limits):
                return
            self._waiters.popleft()
            self._take(limits)
            future.set_result(None)

    def _refusal(self, limits: Limits, waited_s: float) -> SandboxesBusy:
        if self.running >= self.budget.max_running:
            what = f"its maximum of {self.budget.max_running} running sandboxes"
        elif self.memory_mb + limits.memory_mb > self.budget.memory_mb:
            what = f"{self.memory_mb} of its {self.budget.memory_mb} MiB sandbox memory budget"
        else:
            what = f"{self.cpus:g} of its {self.budget.cpus:g} cores of sandbox CPU budget"
        waited = f" after waiting {waited_s:g} s" if waited_s else ""
        return SandboxesBusy(
            f"no sandbox free: the server holds {what}{waited}; retry in {self.retry_after_s} s",
            self.retry_after_s,
            running=self.running,
            max_running=self.budget.max_running,
        )

    async def admit(self, limits: Limits, *, queue: bool | None = None) -> Ticket:
        """Reserve room for one sandbox of `limits`; the caller releases the ticket when it is closed.

        Args:
            queue: wait up to `queue_wait_s` for room; None: as `queueing()` says for this context.

        Raises:
            SandboxesBusy: no room (within the wait, when queueing).
            SandboxUnavailable: `limits` alone are over the whole budget: no wait would ever admit it.
        """
        if limits.memory_mb > self.budget.memory_mb or limits.cpus > self.budget.cpus:
            raise SandboxUnavailable(
                f"a sandbox of {limits.memory_mb} MiB and {limits.cpus:g} cpus is over the server's whole "
                f"sandbox budget ({self.budget.memory_mb} MiB, {self.budget.cpus:g} cpus): raise "
                "GYM_SANDBOX__MEMORY_BUDGET_MB / GYM_SANDBOX__CPU_BUDGET"
            )
        if not self._waiters and self._fits(limits):
            self._take(limits)
            return Ticket(self, limits)
        wait_s = self.queue_wait_s if (_may_queue.get() if queue is None else queue) else 0.0
        if wait_s <= 0:
            raise self._refusal(limits, 0.0)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((limits, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), wait_s)
        except BaseException as exc:
            if future.done() and not future.cancelled():  # admitted just as it gave up: hand it back
                self._give_back(limits)
            else:
                future.cancel()
                self._wake()  # it may have been the head of the queue, holding back smaller ones
            if isinstance(exc, TimeoutError):
                raise self._refusal(limits, wait_s) from None
            raise
        return Ticket(self, limits)

    @contextlib.asynccontextmanager
    async def hold(self, limits: Limits, *, queue: bool | None = None) -> AsyncIterator[Ticket]:
        """`admit` for the duration of a block."""
        ticket = await self.admit(limits, queue=queue)
        try:
            yield ticket
        finally:
            ticket.release()


@contextlib.contextmanager
def queueing() -> Iterator[None]:
    """Within this block (and tasks started in it), sandboxes reserved with `queue=None` may queue."""
    token = _may_queue.set(True)
    try:
        yield
    finally:
        _may_queue.reset(token)
