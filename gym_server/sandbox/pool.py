"""A warm pool of sandboxes for stateless runs (verification, one-shot code execution).

Starting a container costs about 200 ms, an exec into a running one about 50 ms: verification should
never pay the start. The pool keeps `size` started sandboxes idle; `acquire()` lends one exclusively and
takes it back afterwards. A returned sandbox is scrubbed (every process killed, the work dir, /tmp and
/dev/shm emptied) before the next borrower sees it, and retired after `max_uses` loans or whenever the
scrub fails or the run broke it, so one candidate's leftovers can never reach another's run. Refills
happen in the background; a burst beyond the pool's size starts extra sandboxes on demand (bounded by
the backend's own start gate). A returned extra takes a free slot (a refill that finishes later closes
its own sandbox instead, since the extra is already warm) and is closed when none is free, so the pool
never holds more than `size`.

With an `Admission`, every loan is admitted first (queueing for a bounded time when the server's cap
on running sandboxes or its budget is taken), so idle warm sandboxes cost nothing against the budget and
the sandboxes actually running code never outnumber it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from gym_server.sandbox.admission import Admission
from gym_server.sandbox.protocol import Command, ExecResult, FileData, Limits, Sandbox, SandboxBackend

__all__ = ["SandboxPool"]

log = logging.getLogger(__name__)


class SandboxPool:
    """Idle sandboxes of one backend and one set of limits, lent one borrower at a time.

    Example:
        ```python
        pool = SandboxPool(backend, size=4)
        await pool.start()
        result = await pool.run(["python3", "-c", "print(6 * 7)"])
        async with pool.acquire() as sandbox:
            await sandbox.put_file("data.csv", "a,b\\n1,2\\n")
            result = await sandbox.exec("wc -l data.csv")
        await pool.aclose()
        ```
    """

    def __init__(
        self,
        backend: SandboxBackend,
        *,
        size: int = 2,
        limits: Limits | None = None,
        max_uses: int = 50,
        admission: Admission | None = None,
    ) -> None:
        if size < 0 or max_uses < 1:
            raise ValueError("pool size must be >= 0 and max_uses >= 1")
        self.backend = backend
        self.size = size
        self.limits = limits or Limits()
        self.max_uses = max_uses
        self.admission = admission
        self._idle: list[Sandbox] = []
        # The pool's own sandboxes, idle or lent: at most `size`. A sandbox joins only when a slot is free
        # at that moment, with no await in between, so a refill and a returning extra never share one.
        self._members: set[str] = set()
        self._starting = 0  # refill starts in flight, so that concurrent refills start no more than needed
        self._uses: dict[str, int] = {}
        self._lent: set[Sandbox] = set()
        self._refill_task: asyncio.Task[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        lent = len(self._lent)
        return f"SandboxPool({self.backend.name}, size={self.size}, idle={len(self._idle)}, lent={lent})"

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def start(self) -> None:
        """Fill the pool now (raises `SandboxUnavailable` when the backend cannot start sandboxes)."""
        await self._fill()

    def _has_room(self) -> bool:
        return not self._closed and len(self._members) < self.size

    def _wants_start(self) -> bool:
        return not self._closed and len(self._members) + self._starting < self.size

    async def _fill(self) -> None:
        while self._wants_start():
            self._starting += 1
            try:
                sandbox = await self.backend.start(self.limits)
            finally:
                self._starting -= 1
            if not self._has_room():  # closed, or a returned sandbox (already warm) took the slot
                await sandbox.close()
                # Look again rather than return: a slot freed during the close found this refill still
                # running, so it scheduled none of its own.
                continue
            self._members.add(sandbox.id)
            self._idle.append(sandbox)

    def _schedule_refill(self) -> None:
        if not self._wants_start():
            return
        if self._refill_task is None or self._refill_task.done():
            self._refill_task = asyncio.get_running_loop().create_task(
                self._refill(), name="gym-sandbox-refill"
            )

    async def _refill(self) -> None:
        try:
            await self._fill()
        except Exception as exc:  # logged, retried at the next loan; a caller's acquire reports it
            log.warning("sandbox pool refill failed: %s", exc)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Sandbox]:
        """Lend a sandbox for the duration of the block; it is scrubbed or retired afterwards.

        Raises:
            SandboxesBusy: the admission found no room within its queueing wait.
        """
        if self._closed:
            raise RuntimeError("the sandbox pool is closed")
        admitted: contextlib.AbstractAsyncContextManager[object] = contextlib.nullcontext()
        if self.admission is not None:
            admitted = self.admission.hold(self.limits, queue=True)
        async with admitted, self._lend() as sandbox:
            yield sandbox

    @contextlib.asynccontextmanager
    async def _lend(self) -> AsyncIterator[Sandbox]:
        sandbox = self._idle.pop() if self._idle else await self.backend.start(self.limits)
        self._schedule_refill()
        self._lent.add(sandbox)
        try:
            yield sandbox
        finally:
            self._lent.discard(sandbox)
            await asyncio.shield(self._give_back(sandbox))

    async def _give_back(self, sandbox: Sandbox) -> None:
        uses = self._uses.get(sandbox.id, 0) + 1
        healthy = not sandbox.closed and uses < self.max_uses and not self._closed
        if healthy and (sandbox.id in self._members or self._has_room()):
            self._members.add(sandbox.id)  # an extra adopted into a free slot, claimed before the scrub
            if await sandbox.scrub() and not self._closed:
                self._uses[sandbox.id] = uses
                self._idle.append(sandbox)
                return
        self._members.discard(sandbox.id)
        self._uses.pop(sandbox.id, None)
        await sandbox.close()
        self._schedule_refill()

    async def run(
        self,
        cmd: Command,
        *,
        stdin: FileData | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, FileData] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the sandbox's own deadline, not a caller's
        **kwargs: Any,
    ) -> ExecResult:
        """One command in a borrowed sandbox (see `Sandbox.exec`)."""
        async with self.acquire() as sandbox:
            return await sandbox.exec(cmd, stdin=stdin, env=env, files=files, timeout=timeout, **kwargs)

    async def aclose(self) -> None:
        """Close idle sandboxes now; lent ones are closed when they come back."""
        self._closed = True
        if self._refill_task is not None:
            self._refill_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refill_task
        idle, self._idle = self._idle, []
        for sandbox in idle:
            self._members.discard(sandbox.id)
            await sandbox.close()
