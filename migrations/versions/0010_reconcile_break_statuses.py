"""The reconciliation's break statuses: an operator's word on each break the nightly job reports
(open, acknowledged, explained with a note, resolved by hand), read back by the job's next runs

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # One row per break the console was told about, by the job's break id (a hash of what the
    # break is about, the same on every day's run); the console upserts it, the job only reads.
    op.create_table(
        "reconcile_break_statuses",
        sa.Column("break_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("kind", sa.String(length=64), nullable=True),
        sa.Column("report", sa.String(length=128), nullable=True),
        sa.Column("actor", sa.String(length=128), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("break_id", name="pk_reconcile_break_statuses"),
    )


def downgrade() -> None:
    op.drop_table("reconcile_break_statuses")
