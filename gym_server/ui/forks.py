"""The inspector's fork tree: an episode's forks grouped by the turn they branch at, each group shown
side by side from its branch point (the shared prefix once, then one column per continuation: the
episode's own and each fork's)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from gym_server.sessions.fork import prefix_length
from gym_server.store.records import TrajectoryRecord
from gym_server.ui.transcript import HighlightBudget, RenderedMessage, render_messages

__all__ = ["Branch", "Column", "branches"]


@dataclass(frozen=True, slots=True)
class Column:
    """One continuation from a branch point: whose it is and its messages after the point."""

    record: TrajectoryRecord
    is_parent: bool
    messages: list[RenderedMessage]


@dataclass(frozen=True, slots=True)
class Branch:
    """The forks at one turn of the parent, beside the parent's own continuation from there."""

    turn: int
    shared: int  # messages before the branch point, the same in every column
    columns: list[Column]


def branches(
    parent: TrajectoryRecord, forks: list[TrajectoryRecord], budget: HighlightBudget
) -> list[Branch]:
    """`forks` (of `parent`, ordered by `parent_turn`) as branch points, each with its columns."""
    found = []
    for turn, group in groupby(forks, key=lambda fork: fork.parent_turn or 0):
        shared = prefix_length(parent.messages, turn)
        columns = [Column(parent, True, render_messages(parent.messages[shared:], budget))]
        columns.extend(Column(fork, False, render_messages(fork.messages[shared:], budget)) for fork in group)
        found.append(Branch(turn, shared, columns))
    return found
