"""The first release's schema: jobs, epochs, statistics batches, proposals (32-bit ids on PostgreSQL).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(200), primary_key=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("registration", sa.Text, nullable=False),
        sa.Column("kgs", sa.Text, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("assignment", sa.Text, nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("last_round_batch", sa.Integer, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "epochs",
        sa.Column("job_id", sa.String(200), primary_key=True),
        sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("proposal_id", sa.String(64), nullable=True),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("assignment", sa.Text, nullable=False),
        sa.Column("plan", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "stats_batches",
        sa.Column("job_id", sa.String(200), primary_key=True),
        sa.Column("batch_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("kg_index", sa.LargeBinary, nullable=False),
        sa.Column("load", sa.LargeBinary, nullable=False),
        sa.Column("state_bytes", sa.LargeBinary, nullable=True),
        sa.Column("comm", sa.LargeBinary, nullable=True),
        sa.Column("received_at", sa.Float, nullable=False),
    )
    op.create_table(
        "proposals",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.String(200), nullable=False),
        sa.Column("base_epoch", sa.Integer, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("algorithm", sa.String(100), nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("time_limit_s", sa.Float, nullable=False),
        sa.Column("window", sa.Text, nullable=True),
        sa.Column("plan", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("executed_epoch", sa.Integer, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_proposals_job_id", "proposals", ["job_id"])


def downgrade() -> None:
    raise NotImplementedError("downgrades are not supported: restore a backup of the database instead")
