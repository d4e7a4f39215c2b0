"""check-back assignments: which instance a check went to, pull pickup, discard reason

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("check_client_id", sa.String(length=255), nullable=True))
        batch.add_column(
            sa.Column(
                "check_pending_pull", sa.Boolean(), server_default=sa.text("false"), nullable=False
            )
        )
        batch.add_column(sa.Column("discard_reason", sa.String(length=64), nullable=True))
    op.create_index("ix_transactions_pull", "transactions", ["producer_group", "check_client_id"])


def downgrade() -> None:
    op.drop_index("ix_transactions_pull", table_name="transactions")
    with op.batch_alter_table("transactions") as batch:
        batch.drop_column("discard_reason")
        batch.drop_column("check_pending_pull")
        batch.drop_column("check_client_id")
