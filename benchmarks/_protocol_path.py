"""What a protocol path of `protocols.py` is: how one simulated client plays counter episodes through it.

A path is a name and a factory of `EpisodeClient`s. The driver in `protocols.py` owns the clock: it
calls `begin` (open an episode), `step` K times (the last one `submit`s, which ends the episode and
scores it), then `end` (close it, if the protocol has to be told), and times every `step`. So every path
plays the same episode of the same environment, and only the wire and the facade differ. A new path
(NeMo Gym, say) is a module of its own with a `PATHS` list, added to the table in `protocols.py`.

A path may instead name a peer's own server (`PeerServer`): the driver starts it for that path's levels,
on the gym server's core, and the same kind of client plays the same episode against it, which is how
the gym's facade is compared with the peer's own implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["COUNTER_TASKS", "EpisodeClient", "PeerServer", "ProtocolPath", "UnexpectedAnswer", "task_id"]

COUNTER_TASKS = 60  # counter-0000 .. counter-0059


def task_id(index: int) -> str:
    return f"counter-{index % COUNTER_TASKS:04d}"


class UnexpectedAnswer(Exception):
    """An answer that is not the success the path expects (counted as an error by the driver)."""


class EpisodeClient(Protocol):
    """One simulated client with one connection, playing one episode at a time."""

    async def connect(self) -> None: ...

    async def begin(self, index: int) -> None:
        """Open an episode of task `task_id(index)` with seed `index`."""

    async def step(self, last: bool) -> None:
        """One step: `add(1)`, or `submit` when `last`. Raises on anything but a success."""

    async def end(self) -> None:
        """Close the episode (a no-op where the last step or the next `begin` closes it)."""

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PeerServer:
    """A peer's own server for a path: how to start it on a port, and where it answers when ready."""

    argv: Callable[[int], list[str]]  # port -> the command line
    ready_path: str
    missing: str | None = None  # why it cannot run here (its venv is not built); the path is skipped


@dataclass(frozen=True, slots=True)
class ProtocolPath:
    name: str
    what: str
    client: Callable[[str, int], EpisodeClient]  # (host, port) -> a client
    server: PeerServer | None = None  # None: the gym server under test
