"""Tenants and API keys: every trajectory belongs to a tenant; keys are stored hashed.

Rows written before tenants existed get the `default` tenant (the one a server without authentication
writes), so turning authentication on later keeps them readable by keys of that tenant.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gym_server.store.models import UTCDateTime

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.add_column(sa.Column("tenant", sa.String(64), nullable=False, server_default="default"))
    op.create_index("ix_trajectories_tenant", "trajectories", ["tenant"])
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(64), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
    op.drop_index("ix_trajectories_tenant", table_name="trajectories")
    with op.batch_alter_table("trajectories") as batch:
        batch.drop_column("tenant")
