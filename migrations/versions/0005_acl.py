"""ACL: nonces of signed requests, published ACL versions, the access key of a producer instance

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Keyed by the signed timestamp first: inserts land at the right edge of the one B-tree and
    # the purge cuts its left edge (no index of their own, no row ids on SQLite).
    op.create_table(
        "acl_nonces",
        sa.Column("signed_at", sa.BigInteger(), nullable=False),
        sa.Column("access_key", sa.String(length=128), nullable=False),
        sa.Column("nonce", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("signed_at", "access_key", "nonce"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "acl_versions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("published_at", sa.BigInteger(), nullable=False),
        sa.Column("published_by", sa.String(length=128), nullable=False),
    )
    with op.batch_alter_table("producers") as batch:
        batch.add_column(sa.Column("access_key", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("producers") as batch:
        batch.drop_column("access_key")
    op.drop_table("acl_versions")
    op.drop_table("acl_nonces")
