"""RocketMQ 5 gRPC clients: each broker's gRPC listener; each gRPC client's language, version and
the Settings it last wrote

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # host:port of the broker's gRPC listener (NULL when it has none): QueryRoute answers every
    # live broker's.  Nullable columns without defaults: no table rewrite.
    with op.batch_alter_table("brokers") as batch:
        batch.add_column(sa.Column("grpc_address", sa.String(length=255), nullable=True))
    # Each gRPC client by its id: what it says it is (PYTHON, JAVA, NODE_JS... and its version;
    # the console and the trace show it) and the Settings it last wrote down its Telemetry stream
    # (serialized protobuf): a stream that reopens under the same client id, on any broker, is
    # registered with them at once.
    op.create_table(
        "grpc_clients",
        sa.Column("client_id", sa.String(length=255), primary_key=True),
        sa.Column("access_key", sa.String(length=128), nullable=True),
        sa.Column("language", sa.String(length=32), nullable=False),
        sa.Column("client_version", sa.String(length=64), nullable=False),
        sa.Column("settings", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("grpc_clients")
    with op.batch_alter_table("brokers") as batch:
        batch.drop_column("grpc_address")
