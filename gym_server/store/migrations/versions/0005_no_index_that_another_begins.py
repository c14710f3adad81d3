"""Drop the run and env indexes of revision 0001: the inspector's run and env page indexes (0003) begin
with the same column, so every query one of them served the other serves as well, and each acknowledged
create or close wrote both for nothing (with revision 0004's triggers, a one-row commit 266 -> 222 us of
CPU with the close's narrow update; docs/benchmarks.md).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DROPPED = ("run", "env")


def upgrade() -> None:
    for column in _DROPPED:
        op.drop_index(f"ix_trajectories_{column}", table_name="trajectories")


def downgrade() -> None:
    for column in _DROPPED:
        op.create_index(f"ix_trajectories_{column}", "trajectories", [column])
