"""Batch ids and epochs are signed 64-bit integers: PostgreSQL's INTEGER columns become BIGINT.

SQLite's INTEGER already stores 64-bit values (its type affinity ignores the declared width), so nothing changes
there.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

#: the 64-bit id columns per table
WIDENED = {"jobs": ("epoch", "last_round_batch"), "epochs": ("epoch",), "stats_batches": ("batch_id", "epoch"),
           "proposals": ("base_epoch", "executed_epoch")}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, cols in WIDENED.items():
        for col in cols:
            op.alter_column(table, col, type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    raise NotImplementedError("downgrades are not supported: restore a backup of the database instead")
