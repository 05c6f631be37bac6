"""The leader lease of the replicas on one PostgreSQL database: a row with an expiry on the database's clock and
a fencing epoch (controller/leadership.py); SQLite databases get the table too and never use it.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader_lease",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("url", sa.Text, nullable=True),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("renewed_at", sa.Float, nullable=False),
        sa.Column("holder_pid", sa.Integer, nullable=True),
    )


def downgrade() -> None:
    raise NotImplementedError("downgrades are not supported: restore a backup of the database instead")
