"""How a live session becomes the trajectory row the store keeps: the `live` snapshots the reaper hands
over, and the final record its close, expiry, failure or the server's shutdown writes.

The lists that go on growing (messages, turns, step times) are copied, so a snapshot queued for the
writer never changes under it. The record is built with `model_construct` (no validation): every field
comes from the server's own state, checked when it was made, and this runs on every create, snapshot
and close.
"""

from __future__ import annotations

from typing import Any

from gym_server.sessions.live import LiveSession
from gym_server.store.records import BUFFER_GROUP_KEY, TrajectoryRecord, TrajectoryStatus, utcnow
from gym_server.store.versions import version_range

__all__ = ["trajectory_record"]


def trajectory_record(
    session: LiveSession, status: TrajectoryStatus, server_name: str, finished: bool = False
) -> TrajectoryRecord:
    """The trajectory of `session` as it stands, with `status`; `finished` stamps `finished_at` now."""
    env = session.env
    verified = session.verified
    timings: dict[str, Any] = {"step_ms": list(session.step_ms)}
    if session.step_ms:
        timings["total_step_ms"] = round(sum(session.step_ms), 3)
    turns = list(session.turn_data)
    version_min, version_max = version_range(session.policy, turns)
    return TrajectoryRecord.model_construct(
        id=session.id,
        run=session.run,
        env=session.entry.name,
        env_version=session.entry.version,
        task_id=env.task.id,
        seed=env.seed,
        status=status,
        failure=session.failure or (verified.failure if verified else None),
        done_reason=env.done_reason,
        messages=list(env.messages),
        tools=session.tools,
        reward=verified.reward if verified else None,
        components=dict(verified.components) if verified else {},
        verify_info=dict(verified.info) if verified else {},
        verifier_version=session.entry.verifier_version,
        policy=session.policy,
        turns=turns,
        timings=timings,
        metadata=session.metadata,
        num_turns=env.turns,
        version_min=version_min,
        version_max=version_max,
        buffer_group=session.metadata.get(BUFFER_GROUP_KEY),  # a string: `storable.check_episode`
        server_name=server_name,
        tenant=session.tenant,
        parent_id=session.parent_id,
        parent_turn=session.parent_turn,
        created_at=session.created_at,
        finished_at=utcnow() if finished else None,
    )
