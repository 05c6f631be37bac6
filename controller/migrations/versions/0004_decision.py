"""Proposals keep the rebalancing policy's verdict on their plan (JSON, null for proposals made before).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("proposals", sa.Column("decision", sa.Text, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("downgrades are not supported: restore a backup of the database instead")
