"""Trajectories and their re-scores.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gym_server.store.models import UTCDateTime

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEXED = ("run", "env", "task_id", "status", "created_at", "server_name")


def upgrade() -> None:
    op.create_table(
        "trajectories",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("run", sa.String(255), nullable=True),
        sa.Column("env", sa.String(255), nullable=False),
        sa.Column("env_version", sa.String(128), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("failure", sa.String(64), nullable=True),
        sa.Column("done_reason", sa.Text(), nullable=True),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("tools", sa.JSON(), nullable=False),
        sa.Column("reward", sa.Double(), nullable=True),
        sa.Column("components", sa.JSON(), nullable=False),
        sa.Column("verify_info", sa.JSON(), nullable=False),
        sa.Column("verifier_version", sa.String(128), nullable=True),
        sa.Column("policy", sa.JSON(), nullable=True),
        sa.Column("turns", sa.JSON(), nullable=False),
        sa.Column("timings", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("num_turns", sa.Integer(), nullable=False),
        sa.Column("server_name", sa.String(255), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
    )
    for column in _INDEXED:
        op.create_index(f"ix_trajectories_{column}", "trajectories", [column])
    op.create_table(
        "rescores",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "trajectory_id",
            sa.String(128),
            sa.ForeignKey("trajectories.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("reward", sa.Double(), nullable=True),
        sa.Column("components", sa.JSON(), nullable=False),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.Column("failure", sa.String(64), nullable=True),
        sa.Column("verifier_version", sa.String(128), nullable=True),
        sa.Column("previous_reward", sa.Double(), nullable=True),
        sa.Column("previous_verifier_version", sa.String(128), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_rescores_trajectory_id", "rescores", ["trajectory_id"])


def downgrade() -> None:
    op.drop_index("ix_rescores_trajectory_id", table_name="rescores")
    op.drop_table("rescores")
    for column in reversed(_INDEXED):
        op.drop_index(f"ix_trajectories_{column}", table_name="trajectories")
    op.drop_table("trajectories")
