"""Job generations: a re-registered job id is a new generation; proposals carry theirs.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("generation", sa.String(32), nullable=True))
    op.add_column("proposals", sa.Column("generation", sa.String(32), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("downgrades are not supported: restore a backup of the database instead")
