"""Job generations (issue 12): a job id registered again is a new generation; proposals carry the generation they
were made for.

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
