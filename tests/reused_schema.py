"""One migrated PostgreSQL schema per test session (per pytest-xdist worker), emptied for each test
that asks for a migrated store, instead of a schema created and migrated by Alembic per test.

Emptying is TRUNCATE of the tables that hold rows (which also zeroes their dead-row statistics,
which the store's VACUUM rule reads) and a restart of every sequence: the test sees what a fresh
migration gives.  A test that changed the schema's shape (dropped a table, downgraded it) or left
a lock behind gets a new schema, migrated afresh, and the old one is dropped.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

# A lock a test left (it should not) stops emptying the schema after this, not the whole suite.
LOCK_TIMEOUT = "lock_timeout = '10s'"


def _shape(conn: Connection, schema: str) -> tuple[object, ...]:
    """The schema's tables, columns and indexes, and its migration: what a test may not change (indexes are
    relations, so their columns are here too)."""
    columns = conn.execute(
        text(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2"
        ),
        {"s": schema},
    ).all()
    version = conn.execute(text(f'SELECT version_num FROM "{schema}".alembic_version')).all()
    return tuple(columns), tuple(version)


class ReusedSchema:
    """The session's migrated schema on the PostgreSQL at ``base_url``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        # A connection per use, closed at once: its statistics (the truncation's zeroed counts)
        # reach the server as the session ends, before the test reads them.
        self.engine: Engine = create_engine(
            base_url, isolation_level="AUTOCOMMIT", poolclass=NullPool
        )
        self.name = ""
        self.shape: tuple[object, ...] = ()

    @property
    def url(self) -> str:
        return f"{self.base_url}?options=-csearch_path%3D{self.name}"

    def create(self) -> None:
        from broker_service.store import migrate

        self.name = f"halfmq_t_{uuid.uuid4().hex[:12]}"
        with self.engine.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{self.name}"'))
        migrate.upgrade(self.url)
        with self.engine.connect() as conn:
            self.shape = _shape(conn, self.name)

    def empty(self) -> str:
        """The schema as a fresh migration leaves it (a new one if the last test changed it)."""
        if not self.name:
            self.create()
            return self.url
        try:
            with self.engine.connect() as conn:
                conn.execute(text(f"SET {LOCK_TIMEOUT}"))
                if _shape(conn, self.name) != self.shape:
                    raise LookupError("the schema's shape changed")
                self._truncate(conn)
        except (DBAPIError, LookupError):
            self.drop()
            self.create()
        return self.url

    def _truncate(self, conn: Connection) -> None:
        schema = self.name
        tables = conn.execute(
            text(
                "SELECT tablename FROM pg_tables WHERE schemaname = :s AND tablename <> 'alembic_version'"
            ),
            {"s": schema},
        ).scalars()
        probes = " UNION ALL ".join(
            f'SELECT \'{t}\' WHERE EXISTS (SELECT FROM "{schema}"."{t}")' for t in tables
        )
        filled = conn.execute(text(probes)).scalars().all()
        if filled:
            names = ", ".join(f'"{schema}"."{t}"' for t in filled)
            conn.execute(text(f"TRUNCATE {names}"))
        conn.execute(
            text(
                "SELECT setval(format('%I.%I', schemaname, sequencename), start_value, false) "
                "FROM pg_sequences WHERE schemaname = :s"
            ),
            {"s": schema},
        )

    def drop(self) -> None:
        """Drop the schema; one still locked is left to the session's end (best effort)."""
        if not self.name:
            return
        try:
            with self.engine.connect() as conn:
                conn.execute(text(f"SET {LOCK_TIMEOUT}"))
                conn.execute(text(f'DROP SCHEMA "{self.name}" CASCADE'))
        except DBAPIError:
            pass
        self.name = ""

    def close(self) -> None:
        self.drop()
        self.engine.dispose()
