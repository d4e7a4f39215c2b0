"""Retention: purged ids, the scheduler lease, expired counts, the key index by position

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # One 64-bit hash per purged msg_id or transaction id, so a lookup of a purged id answers
    # "expired" rather than "never existed"; kept for as long again as the retention.
    op.create_table(
        "purged_ids",
        sa.Column("id_hash", sa.BigInteger(), nullable=False),
        sa.Column("purged_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id_hash"),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_purged_ids_purged_at", "purged_ids", ["purged_at"])
    # Background work that one broker of several on one database runs at a time (the purge).
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("until", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("consumer_offsets") as batch:
        batch.add_column(
            sa.Column("expired", sa.BigInteger(), nullable=False, server_default=sa.text("0"))
        )
    # The purge drops the key rows of the messages it drops, found by position.
    op.create_index(
        "ix_message_keys_topic_queue_id_queue_offset",
        "message_keys",
        ["topic", "queue_id", "queue_offset"],
    )


def downgrade() -> None:
    op.drop_index("ix_message_keys_topic_queue_id_queue_offset", table_name="message_keys")
    with op.batch_alter_table("consumer_offsets") as batch:
        batch.drop_column("expired")
    op.drop_table("leases")
    op.drop_index("ix_purged_ids_purged_at", table_name="purged_ids")
    op.drop_table("purged_ids")
