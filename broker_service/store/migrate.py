"""Alembic from the broker: upgrade the schema, and tell whether a store's schema is current."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine


def migrations_dir() -> Path:
    """``migrations/`` beside the packages (a source checkout) or inside the installed wheel."""
    package = Path(__file__).resolve().parents[1]  # broker_service/
    for candidate in (package.parent / "migrations", package / "_migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise FileNotFoundError("the broker's Alembic migrations are not installed")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    engine = create_engine(url)
    try:
        if engine.dialect.name == "sqlite":
            _incremental_vacuum(engine)
        with engine.begin() as conn:
            config = alembic_config(url)
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def _incremental_vacuum(engine: Engine) -> None:
    """SQLite: the store gives the pages retention frees back to the file system
    (``PRAGMA incremental_vacuum``, after each purge round) only in ``auto_vacuum =
    INCREMENTAL`` mode.  A new file takes the mode at once; an existing one is rebuilt once
    (``VACUUM``: as long as copying the file, which is why it happens here, at an upgrade)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if conn.exec_driver_sql("PRAGMA auto_vacuum").scalar() == _INCREMENTAL:
            return
        conn.exec_driver_sql(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
        if conn.exec_driver_sql("PRAGMA page_count").scalar():
            conn.exec_driver_sql("VACUUM")


_INCREMENTAL = 2  # SQLite's auto_vacuum modes: 0 none, 1 full, 2 incremental


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    current: str | None
    head: str

    @property
    def is_current(self) -> bool:
        return self.current == self.head

    @property
    def is_empty(self) -> bool:
        return self.current is None


def schema_status(engine: Engine) -> SchemaStatus:
    head = ScriptDirectory.from_config(
        alembic_config(engine.url.render_as_string(hide_password=False))
    ).get_current_head()
    assert head is not None
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return SchemaStatus(current, head)
