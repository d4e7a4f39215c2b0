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
        with engine.begin() as conn:
            config = alembic_config(url)
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        engine.dispose()


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
