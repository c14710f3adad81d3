"""Callers queued for a worker, and the tokens handed to them (a worker, a free slot, or "closed")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeAlias

from gym_server.workers._handle import Worker
from gym_server.workers.errors import PoolClosed

__all__ = ["CLOSED", "Closed", "Token", "Waiter", "opened"]


class Closed:
    """The token a queued caller receives when the pool closes."""


CLOSED = Closed()
Token: TypeAlias = "Worker | Closed | None"  # None: a free slot, start your own worker


class Waiter:
    """A caller queued for a worker: a thread blocked on an event, or a coroutine awaiting a future.

    `hand_back` takes a token that arrives after its caller gave up (a cancelled coroutine).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None, hand_back: Callable[[Token], None]) -> None:
        self.loop = loop
        self.future: asyncio.Future[Token] | None = loop.create_future() if loop is not None else None
        self.event = threading.Event()
        self.token: Token = None
        self.hand_back = hand_back

    def deliver(self, token: Token) -> bool:
        """Hand the token over; False when the waiter is gone (its loop closed)."""
        if self.loop is None:
            self.token = token
            self.event.set()
            return True
        try:
            self.loop.call_soon_threadsafe(self._settle, token)
        except RuntimeError:
            return False
        return True

    def _settle(self, token: Token) -> None:
        assert self.future is not None
        if not self.future.done():
            self.future.set_result(token)
        else:  # the caller was cancelled meanwhile
            self.hand_back(token)


def opened(token: Token) -> Worker | None:
    if isinstance(token, Closed):
        raise PoolClosed("the pool closed while the call was queued")
    return token
