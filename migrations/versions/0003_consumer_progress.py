"""consumer progress: pull offset per group queue, partial indexes of open deliveries

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OPEN = sa.text("state IN ('INFLIGHT', 'RETRYING')")


def upgrade() -> None:
    with op.batch_alter_table("consumer_offsets") as batch:
        batch.add_column(
            sa.Column("pulled_offset", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )
    op.drop_index("ix_deliveries_inflight", table_name="deliveries")
    op.drop_index("ix_deliveries_queue", table_name="deliveries")
    op.create_index(
        "ix_deliveries_open",
        "deliveries",
        ["consumer_group", "topic", "queue_id", "queue_offset"],
        sqlite_where=_OPEN,
        postgresql_where=_OPEN,
    )
    op.create_index(
        "ix_deliveries_due",
        "deliveries",
        ["consumer_group", "invisible_until"],
        sqlite_where=_OPEN,
        postgresql_where=_OPEN,
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_due", table_name="deliveries")
    op.drop_index("ix_deliveries_open", table_name="deliveries")
    op.create_index(
        "ix_deliveries_queue",
        "deliveries",
        ["consumer_group", "topic", "queue_id", "queue_offset"],
        unique=False,
    )
    op.create_index(
        "ix_deliveries_inflight", "deliveries", ["state", "invisible_until"], unique=False
    )
    with op.batch_alter_table("consumer_offsets") as batch:
        batch.drop_column("pulled_offset")
