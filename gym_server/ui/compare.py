"""Two sides of a comparison (runs or policies) matched task by task: which tasks got better or worse."""

from __future__ import annotations

from dataclasses import dataclass

from gym_server.store.inspector import TaskReward

__all__ = ["Comparison", "TaskDelta", "compare_tasks"]

# Mean rewards closer than this are the same (float noise of AVG over identical rewards).
_SAME = 1e-9


@dataclass(frozen=True, slots=True)
class TaskDelta:
    """A task both sides attempted: each side's mean reward and episode count, and B minus A."""

    task_id: str
    a: TaskReward
    b: TaskReward

    @property
    def delta(self) -> float | None:
        if self.a.reward_mean is None or self.b.reward_mean is None:
            return None
        return self.b.reward_mean - self.a.reward_mean


@dataclass(frozen=True, slots=True)
class Comparison:
    """Common tasks side by side (largest change first), split into better, worse and unchanged."""

    rows: list[TaskDelta]
    better: list[TaskDelta]
    worse: list[TaskDelta]
    unchanged: int
    only_a: int
    only_b: int


def compare_tasks(a: dict[str, TaskReward], b: dict[str, TaskReward]) -> Comparison:
    """Match the per-task means of side A and side B on the tasks both have."""
    rows = [TaskDelta(task_id, a[task_id], b[task_id]) for task_id in sorted(a.keys() & b.keys())]
    scored = [row for row in rows if row.delta is not None]
    better = sorted(
        (row for row in scored if (row.delta or 0.0) > _SAME), key=lambda row: -(row.delta or 0.0)
    )
    worse = sorted((row for row in scored if (row.delta or 0.0) < -_SAME), key=lambda row: row.delta or 0.0)
    rows.sort(key=lambda row: (-abs(row.delta or 0.0), row.task_id))
    return Comparison(
        rows=rows,
        better=better,
        worse=worse,
        unchanged=len(scored) - len(better) - len(worse),
        only_a=len(a.keys() - b.keys()),
        only_b=len(b.keys() - a.keys()),
    )
