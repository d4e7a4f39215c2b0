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
    op.create_table(
        "acl_nonces",
        sa.Column("access_key", sa.String(length=128), nullable=False),
        sa.Column("nonce", sa.String(length=128), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("access_key", "nonce"),
    )
    op.create_index("ix_acl_nonces_expires_at", "acl_nonces", ["expires_at"])
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
    op.drop_index("ix_acl_nonces_expires_at", table_name="acl_nonces")
    op.drop_table("acl_nonces")
