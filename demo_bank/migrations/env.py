"""Alembic environment of a demo bank's database: the bank's own tables and the framework's
(``framework.tables.metadata``), as a user's service would include them.

Run by :func:`demo_bank.db.upgrade` (``python -m demo_bank migrate URL`` by hand), on an engine
of :func:`demo_bank.db.make_engine`: a new SQLite file is in WAL mode from the start."""

from __future__ import annotations

from alembic import context

from demo_bank.db import make_engine
from demo_bank.schema import metadata as bank_metadata
from framework.tables import metadata as halfmq_metadata

config = context.config
target_metadata = [bank_metadata, halfmq_metadata]


def run_migrations_online() -> None:
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.begin() as conn:
            context.configure(connection=conn, target_metadata=target_metadata, compare_type=True)
            with context.begin_transaction():
                context.run_migrations()
    finally:
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
