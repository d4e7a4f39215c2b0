"""check delivery: a check that never reached a producer is not counted

Per half, the last check error and since when its checks have failed delivery; per producer
instance, until when it is skipped after a check could not be delivered to it, and why.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNDELIVERED = sa.text("undelivered_since IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("last_check_error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("last_check_error_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("undelivered_since", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_transactions_undelivered",
        "transactions",
        ["undelivered_since"],
        sqlite_where=_UNDELIVERED,
        postgresql_where=_UNDELIVERED,
    )
    with op.batch_alter_table("producers") as batch:
        batch.add_column(sa.Column("unreachable_until", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("last_error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("last_error_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_index("ix_transactions_undelivered", table_name="transactions")
    with op.batch_alter_table("producers") as batch:
        batch.drop_column("last_error_at")
        batch.drop_column("last_error")
        batch.drop_column("unreachable_until")
    with op.batch_alter_table("transactions") as batch:
        batch.drop_column("undelivered_since")
        batch.drop_column("last_check_error_at")
        batch.drop_column("last_check_error")
