"""Fork lineage: a forked episode names the episode and the turn it was forked at (docs/fork.md).

Both columns are nullable (an episode that is not a fork has neither), so they are added with a plain
`ALTER TABLE ... ADD COLUMN` on either database (and dropped with a plain `DROP COLUMN`): no table
rebuild, so revision 0004's triggers on `trajectories` stay as they are. `parent_id` is indexed to list
an episode's forks.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("trajectories", sa.Column("parent_id", sa.String(128), nullable=True))
    op.add_column("trajectories", sa.Column("parent_turn", sa.Integer(), nullable=True))
    op.create_index("ix_trajectories_parent_id", "trajectories", ["parent_id"])


def downgrade() -> None:
    op.drop_index("ix_trajectories_parent_id", table_name="trajectories")
    # Plain DROP COLUMN (SQLite 3.35 and later, PostgreSQL): a batch rebuild of the table on SQLite would
    # drop revision 0003's expression index and 0004's triggers with it.
    for column in ("parent_turn", "parent_id"):
        op.execute(f"ALTER TABLE trajectories DROP COLUMN {column}")
