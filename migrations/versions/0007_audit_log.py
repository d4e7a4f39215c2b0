"""The console's audit log

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Who did what through the console, when, and how it ended; retention does not purge it.
    op.create_table(
        "audit_log",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("access_key", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=512), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("result", sa.String(length=16), nullable=False),
    )
    op.create_index("ix_audit_log_subject_id", "audit_log", ["subject", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_subject_id", table_name="audit_log")
    op.drop_table("audit_log")
