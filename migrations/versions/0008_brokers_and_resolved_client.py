"""The brokers sharing the store; the producer instance that committed or rolled back

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # One row per broker, upserted at its start and at every presence beat: the console's
    # overview and GET /v1/brokers list them, live when seen within three beats.
    op.create_table(
        "brokers",
        sa.Column("broker_id", sa.String(length=128), primary_key=True),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("store_kind", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_at", sa.BigInteger(), nullable=False),
    )
    # The client_id a producer's commit or rollback named (the message trace's "by"); written by
    # the resolving UPDATE itself.  A nullable column without a default: no table rewrite.
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("resolved_client", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.drop_column("resolved_client")
    op.drop_table("brokers")
