"""Alembic environment of a demo bank's database: the bank's own tables and the framework's
(``framework.tables.metadata``), as a user's service would include them.

Run by :func:`demo_bank.db.upgrade` (which passes the connection), or by hand with
``python -m demo_bank migrate URL``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from demo_bank.schema import metadata as bank_metadata
from framework.tables import metadata as halfmq_metadata

config = context.config
target_metadata = [bank_metadata, halfmq_metadata]


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
