"""Alembic environment for the broker's schema.

The URL comes from the caller (``halfmq db upgrade`` passes a connection or ``sqlalchemy.url``);
run as plain ``alembic upgrade head`` it falls back to the broker settings (``HALFMQ_DATABASE_URL``).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from broker_service.store.schema import metadata

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from broker_service.settings import BrokerSettings

    return BrokerSettings().database_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url())
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
