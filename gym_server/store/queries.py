"""`StoreQueries`: what the store runs through an ORM session in a worker thread.

Reads of the stored rows, the start-up's `mark_lost` and a re-score's insert: each is one committed
transaction in `asyncio.to_thread` on the store's second engine (the writer thread and the event loop
keep their own connections for the rows they commit, `write_link`), so the event loop never waits on
the database. When the database does not answer, they raise `StoreUnavailable` (a 503). It is the base
class of `TrajectoryStore`, which opens the engine in `start()`; `TrajectoryStore.get` reads the queued
record first and only then calls down to the database.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gym_server.core.errors import StoreUnavailable
from gym_server.store import repository
from gym_server.store.migrate import describe_error, is_outage, mask_url
from gym_server.store.records import TrajectoryRecord, TrajectoryStatus
from gym_server.store.repository import RescoreRecord

__all__ = ["StoreQueries"]

T = TypeVar("T")


class StoreQueries:
    """The queries of `TrajectoryStore` (see the module docstring); not made on its own."""

    _url: str
    _sessions: sessionmaker[Session] | None  # None until the store starts, and after it stops

    async def mark_lost(self, server_name: str) -> int:
        """Mark the live trajectories `server_name` left in the database lost; call once at start-up."""
        return await self._call(partial(repository.mark_lost, server_name=server_name))

    async def add_rescore(
        self,
        trajectory_id: str,
        *,
        reward: float | None,
        components: dict[str, float],
        verifier_version: str | None,
        info: dict[str, object] | None = None,
        failure: str | None = None,
    ) -> RescoreRecord:
        """Store a re-verification and make it the trajectory's score (see `repository.add_rescore`)."""
        rescore = partial(repository.add_rescore, trajectory_id=trajectory_id, info=info, failure=failure)
        return await self._call(
            partial(rescore, reward=reward, components=components, verifier_version=verifier_version)
        )

    async def list(
        self,
        *,
        run: str | None = None,
        env: str | None = None,
        task_id: str | None = None,
        status: TrajectoryStatus | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> builtins.list[TrajectoryRecord]:
        """One page of stored records, newest first; records still queued appear after the next flush."""
        query = partial(repository.list_trajectories, run=run, env=env, task_id=task_id, status=status)
        return await self._call(partial(query, offset=offset, limit=limit))

    async def page(
        self, where: repository.TrajectoryFilter, *, offset: int = 0, limit: int = 100
    ) -> tuple[builtins.list[TrajectoryRecord], int]:
        """One page of stored records, newest first, and the number matching in all, read together."""
        page = partial(repository.page_trajectories, where=where, offset=offset, limit=limit)
        return await self._call(page)

    async def count(
        self,
        *,
        run: str | None = None,
        env: str | None = None,
        task_id: str | None = None,
        status: TrajectoryStatus | None = None,
    ) -> int:
        """How many stored records match the filters."""
        return await self._call(
            partial(repository.count_trajectories, run=run, env=env, task_id=task_id, status=status)
        )

    async def list_rescores(self, trajectory_id: str) -> builtins.list[RescoreRecord]:
        """Every re-score of one trajectory, oldest first."""
        return await self._call(partial(repository.list_rescores, trajectory_id=trajectory_id))

    async def read(self, query: Callable[[Session], T]) -> T:
        """Run a read-only `query` (a `store.inspector` function, say) in a worker thread.

        Outages become `StoreUnavailable` (a 503), as for every other read of the store.
        """
        return await self._call(query)

    async def transact(self, work: Callable[[Session], T]) -> T:
        """Run `work` (a `store.buffer` function, say) in a worker thread, in one transaction committed
        before this returns: an answer sent after it is an acknowledgement of a committed change.

        Outages become `StoreUnavailable` (a 503); an error `work` raises rolls everything back.
        """
        return await self._call(work)

    async def ping(self) -> bool:
        """Whether the database answers `SELECT 1` (for readiness probes); never raises."""
        try:
            await self._call(lambda session: session.execute(text("SELECT 1")))
        except (StoreUnavailable, SQLAlchemyError, RuntimeError):
            return False
        return True

    async def _call(self, work: Callable[[Session], T]) -> T:
        """Run `work` in a worker thread inside one committed transaction."""
        sessions = self._sessions
        if sessions is None:
            raise RuntimeError(f"{self!r} is not running; start() it first")
        return await asyncio.to_thread(self._in_transaction, sessions, work)

    def _in_transaction(self, sessions: sessionmaker[Session], work: Callable[[Session], T]) -> T:
        try:
            with sessions.begin() as session:
                return work(session)
        except SQLAlchemyError as exc:
            if not is_outage(exc):
                raise
            raise StoreUnavailable(
                f"trajectory database {mask_url(self._url)} unavailable: {describe_error(exc)}"
            ) from exc
