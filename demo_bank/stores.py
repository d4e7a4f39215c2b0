"""Where a demo run keeps its three databases (the broker's, Bob's, Smith's).

* ``sqlite``: three files in the run directory, new for each run.
* ``postgresql``: three databases on the server of ``pg_url`` (default
  ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``), named ``<prefix>_broker``,
  ``<prefix>_bob`` and ``<prefix>_smith``, dropped and created again for each run and kept
  afterwards for inspection."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
ROLES = ("broker", "bob", "smith")


@dataclass(frozen=True, slots=True)
class Stores:
    broker: str
    bob: str
    smith: str


def sqlite_stores(folder: Path) -> Stores:
    for role in ROLES:
        for suffix in ("", "-wal", "-shm"):
            (folder / f"{role}.db{suffix}").unlink(missing_ok=True)
    urls = {role: f"sqlite:///{(folder / f'{role}.db').resolve()}" for role in ROLES}
    return Stores(**urls)


def postgresql_stores(pg_url: str = DEFAULT_PG, prefix: str = "halfmq_demo") -> Stores:
    server = make_url(pg_url)
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for role in ROLES:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{prefix}_{role}" WITH (FORCE)'))
                conn.execute(text(f'CREATE DATABASE "{prefix}_{role}"'))
    finally:
        engine.dispose()
    urls = {
        role: server.set(database=f"{prefix}_{role}").render_as_string(hide_password=False)
        for role in ROLES
    }
    return Stores(**urls)


def drop_postgresql_stores(pg_url: str = DEFAULT_PG, prefix: str = "halfmq_demo") -> None:
    engine = create_engine(make_url(pg_url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for role in ROLES:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{prefix}_{role}" WITH (FORCE)'))
    finally:
        engine.dispose()
