"""Policy versions as facts of the store, and the rollout buffer's state (docs/rollout-buffer.md).

`trajectories` gains `version_min` and `version_max`: the oldest and newest policy version that sampled
a call of the episode, so a pull can tell how stale a group is without reading transcripts; and
`buffer_group` (its `metadata.buffer_group`) with a partial index, so a pull finds a group's episodes
without reading other rows, and other rows cost nothing more to write. The new
tables: `policy_runs` (a trainer's run, the version it announced last and its staleness bound),
`policy_versions` (when each version was announced), `buffer_groups` (a group a producer was admitted to
play, and where it is: open, ready, leased, consumed, stale) and `buffer_leases` (one pull's hand-out,
until acknowledged). Existing rows keep NULL versions: they predate announcements.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gym_server.store.models import UTCDateTime

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = sa.String(255)
_VERSION_COLUMNS = ("version_min", "version_max")
_MEMBERS = "buffer_group IS NOT NULL"  # the partial index holds the rollout buffer's episodes only


def upgrade() -> None:
    # plain ALTER TABLE, also on SQLite: a batch would copy the table and lose revision 0004's triggers
    for column in _VERSION_COLUMNS:
        op.add_column("trajectories", sa.Column(column, sa.BigInteger(), nullable=True))
    op.add_column("trajectories", sa.Column("buffer_group", _NAME, nullable=True))
    op.create_index(
        "ix_trajectories_buffer_group",
        "trajectories",
        ["buffer_group"],
        sqlite_where=sa.text(_MEMBERS),
        postgresql_where=sa.text(_MEMBERS),
    )
    op.create_table(
        "policy_runs",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("run", _NAME, primary_key=True),
        sa.Column("policy", _NAME, nullable=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("first_version", sa.BigInteger(), nullable=False),
        sa.Column("max_staleness", sa.Integer(), nullable=False),
        sa.Column("groups_per_step", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "policy_versions",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("run", _NAME, primary_key=True),
        sa.Column("version", sa.BigInteger(), primary_key=True),
        sa.Column("announced_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "buffer_groups",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("run", _NAME, nullable=False),
        sa.Column("env", _NAME, nullable=True),
        sa.Column("task_id", _NAME, nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("admitted_version", sa.BigInteger(), nullable=False),
        sa.Column("version_min", sa.BigInteger(), nullable=True),
        sa.Column("version_max", sa.BigInteger(), nullable=True),
        sa.Column("lease_id", sa.String(32), nullable=True),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_buffer_groups_run_state", "buffer_groups", ["tenant", "run", "state", "created_at"])
    op.create_index("ix_buffer_groups_lease_id", "buffer_groups", ["lease_id"])
    op.create_table(
        "buffer_leases",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("run", _NAME, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("groups", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("acknowledged_at", UTCDateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("buffer_leases")
    op.drop_index("ix_buffer_groups_lease_id", table_name="buffer_groups")
    op.drop_index("ix_buffer_groups_run_state", table_name="buffer_groups")
    op.drop_table("buffer_groups")
    op.drop_table("policy_versions")
    op.drop_table("policy_runs")
    op.drop_index("ix_trajectories_buffer_group", table_name="trajectories")
    op.drop_column("trajectories", "buffer_group")
    for column in reversed(_VERSION_COLUMNS):
        op.drop_column("trajectories", column)
