"""Stateless scoring: replay a transcript's assistant turns through a fresh environment, then verify;
and the task a stored episode was played on, which every replay of it (re-scoring, forking) starts from.

One code path serves single-turn completions and whole multi-turn transcripts, and it is the same
engine a live session uses, so a stateless score always equals the score the session would have had.
Tool results in the given transcript are ignored: the environment recomputes them, which means a
client cannot forge a tool result to earn a reward.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from gym_server.core.errors import AtCapacity
from gym_server.core.settings import LimitSettings
from gym_server.sandbox.admission import queueing
from gym_server.sdk.environment import VerifyResult
from gym_server.sdk.registry import EnvironmentEntry
from gym_server.sdk.tasks import Task
from gym_server.sessions.deadlines import run_verifier, step_with_deadline
from gym_server.store.records import INLINE_TASK_KEY, FailureClass, TrajectoryRecord

__all__ = ["stored_task", "verify_transcript"]


def stored_task(entry: EnvironmentEntry, record: TrajectoryRecord) -> Task | None:
    """The task `record`'s episode was played on: the inline one stored with it, else the dataset's task
    of its id (None: not in the dataset any more).

    Blocking: a generated dataset makes the task now (CPU work), so callers on the loop use a thread.

    Raises:
        InvalidRequest: the stored inline task is refused by the environment as installed now.
    """
    inline = record.metadata.get(INLINE_TASK_KEY)
    if inline is None:
        return entry.dataset.get(record.task_id)
    return entry.cls.inline_task(inline)


async def verify_transcript(
    entry: EnvironmentEntry,
    task: Task,
    seed: int | None,
    assistant_messages: list[dict[str, Any]],
    limits: LimitSettings,
) -> VerifyResult:
    """Score `assistant_messages` (in order) against `task` as if they had been played in a session."""
    env = entry.cls(task, seed)
    # Sandboxes this replay reserves (a session-style one in reset, loans in verify) queue for a bounded
    # time when none is free, then refuse: AtCapacity goes to the caller as a 429, never as a score.
    with queueing():
        try:
            try:
                await asyncio.wait_for(env.reset(), limits.tool_timeout_s)
                for message in assistant_messages[: limits.max_turns]:
                    if env.done:
                        break
                    await step_with_deadline(env, message, limits)
            except AtCapacity:
                raise
            except Exception as exc:
                info = {"error": type(exc).__name__}
                return VerifyResult(reward=0.0, failure=FailureClass.ENV_ERROR, info=info)
            return await run_verifier(env, limits.verify_timeout_s)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(env.close(), limits.tool_timeout_s)
