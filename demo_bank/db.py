"""A bank's database: engines with the right SQLite settings, and its Alembic migrations
(``demo_bank/migrations``: the bank's tables, then the framework's log and inbox)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str, **options: Any) -> Engine:
    """SQLite: WAL, a generous busy timeout (local transactions serialize on its write lock).
    PostgreSQL: a pool big enough for a service's worker threads."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30}, **options)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    options.setdefault("pool_size", 20)
    options.setdefault("max_overflow", 20)
    return create_engine(url, **options)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring a bank's database to the current schema (``migrations/env.py`` opens it)."""
    command.upgrade(alembic_config(url), revision)
