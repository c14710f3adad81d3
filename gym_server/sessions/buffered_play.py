"""A producer of the rollout buffer inside the server: a server-driven run (`POST /v1/rollouts` with
`buffer: true`) plays each group only once its policy run admitted it, and waits while the buffer is
as far ahead of the trainer as the staleness bound allows.

Groups are admitted in order, one at a time, and played `at_once` at a time; a group that cannot be
admitted yet (429 `buffer-full`) waits the hinted delay and asks again, so the run follows the trainer's
steps instead of running ahead of them. docs/rollout-buffer.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from gym_server.core.errors import BufferFull
from gym_server.sessions.policy_runs import PolicyRuns

__all__ = ["admit_when_room", "play_groups"]

G = TypeVar("G")


async def admit_when_room(
    runs: PolicyRuns, tenant: str | None, run: str, *, size: int, env: str | None, task_id: str | None
) -> str:
    """The id of a group `run` admitted, after waiting as long as its buffer is full."""
    while True:
        try:
            group_id, _ = await runs.admit(tenant, run, size=size, env=env, task_id=task_id)
        except BufferFull as exc:
            await asyncio.sleep(exc.retry_after_s)
            continue
        return group_id


async def play_groups(
    groups: Sequence[G],
    admit: Callable[[G], Awaitable[str]],
    play: Callable[[str, G], Coroutine[Any, Any, None]],
    *,
    at_once: int,
) -> None:
    """Admit each group in order, then play it with its id, at most `at_once` groups playing; the first
    error of a group's play stops the admissions and is raised once the groups in play finished."""
    playing: set[asyncio.Task[None]] = set()
    try:
        for group in groups:
            while len(playing) >= at_once:
                done, playing = await asyncio.wait(playing, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    finished.result()
            group_id = await admit(group)
            playing.add(asyncio.create_task(play(group_id, group)))
    finally:
        if playing:
            results = await asyncio.gather(*playing, return_exceptions=True)
            errors = [result for result in results if isinstance(result, BaseException)]
            if errors and not isinstance(errors[0], asyncio.CancelledError):
                raise errors[0]
