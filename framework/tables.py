"""The framework's two tables in the user's own database, for the user's migrations.

* ``halfmq_local_transaction_log``: one row per local transaction of
  ``@producer.transactional`` -- written inside the user's transaction (state ``COMMIT``), or by a
  check that found no such transaction (state ``ROLLBACK``, a marker the late local transaction
  then collides with).
* ``halfmq_inbox``: one row per (consumer group, dedup key) handled by an idempotent consumer,
  written in the same transaction as the handler's effects.

Alembic: add :data:`metadata` to ``target_metadata`` in ``env.py``
(``target_metadata = [Base.metadata, framework.tables.metadata]``) and autogenerate, or write the
revision by hand with :func:`alembic_upgrade` / :func:`alembic_downgrade` (docs/framework.md).
Without Alembic, :func:`create_tables` creates them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, Engine, Index, MetaData, String, Table

metadata = MetaData()

LOG_TABLE, INBOX_TABLE = "halfmq_local_transaction_log", "halfmq_inbox"


def _log_columns() -> list[Column[Any]]:
    return [
        Column("transaction_id", String(64), primary_key=True),
        Column("producer_group", String(127), nullable=False),
        Column("topic", String(127), nullable=False),
        Column("msg_id", String(128), nullable=False),
        Column("state", String(8), nullable=False),  # COMMIT | ROLLBACK
        Column("created_at", BigInteger, nullable=False),  # epoch milliseconds
    ]


def _inbox_columns() -> list[Column[Any]]:
    return [
        Column("consumer_group", String(127), primary_key=True),
        Column("dedup_key", String(255), primary_key=True),
        Column("msg_id", String(128), nullable=False),
        Column("topic", String(127), nullable=False),
        Column("created_at", BigInteger, nullable=False),  # epoch milliseconds
    ]


_INDEXES = {LOG_TABLE: f"ix_{LOG_TABLE}_created_at", INBOX_TABLE: f"ix_{INBOX_TABLE}_created_at"}

local_transaction_log = Table(
    LOG_TABLE, metadata, *_log_columns(), Index(_INDEXES[LOG_TABLE], "created_at")
)
inbox = Table(INBOX_TABLE, metadata, *_inbox_columns(), Index(_INDEXES[INBOX_TABLE], "created_at"))


def create_tables(engine: Engine) -> None:
    """Create both tables if missing (for users without Alembic, and tests)."""
    metadata.create_all(engine)


def alembic_upgrade() -> None:
    """The body of an Alembic revision's ``upgrade()`` that adds both tables."""
    from alembic import op

    for name, columns in ((LOG_TABLE, _log_columns()), (INBOX_TABLE, _inbox_columns())):
        op.create_table(name, *columns)
        op.create_index(_INDEXES[name], name, ["created_at"])


def alembic_downgrade() -> None:
    from alembic import op

    for name in (INBOX_TABLE, LOG_TABLE):
        op.drop_index(_INDEXES[name], table_name=name)
        op.drop_table(name)
