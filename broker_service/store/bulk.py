"""INSERT of many rows, in as few driver calls as the database allows.

The hot path of the store -- the messages of a group commit, the deliveries of a receive -- skips
SQLAlchemy's per-row parameter processing: the statement text is made once per dialect, and rows are
plain tuples of driver values (ints, strs, bytes, None).

* SQLite: the driver's ``executemany`` (one prepared statement stepped per row, in C).
* PostgreSQL: one statement for the whole set, ``INSERT ... SELECT * FROM unnest(%s::type[], ...)``
  with one array per column.  psycopg's ``executemany`` builds and sends every row as its own
  query (pipelined), and that per-row Python work cost more than the database's insert.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table

_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s", "numeric": ":{n}"}


class BulkInsert:
    def __init__(self, table: Table, columns: Sequence[str]) -> None:
        self.table = table
        self.columns = tuple(columns)
        self._text: dict[str, str] = {}

    def _statement(self, conn: Connection) -> str:
        dialect = conn.dialect
        text = self._text.get(dialect.name)
        if text is None:
            quote = dialect.identifier_preparer.quote
            names = ", ".join(quote(c) for c in self.columns)
            if dialect.name == "postgresql":
                arrays = ", ".join(
                    f"%s::{self.table.c[c].type.compile(dialect=dialect)}[]" for c in self.columns
                )
                source = f"SELECT * FROM unnest({arrays})"
            else:
                placeholder = _PLACEHOLDERS[dialect.paramstyle]
                marks = ", ".join(placeholder.format(n=n + 1) for n in range(len(self.columns)))
                source = f"VALUES ({marks})"
            text = f"INSERT INTO {quote(self.table.name)} ({names}) {source}"
            self._text[dialect.name] = text
        return text

    def execute(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        statement = self._statement(conn)
        if conn.dialect.name == "postgresql":
            columns = [list(values) for values in zip(*rows, strict=True)]
            conn.exec_driver_sql(statement, tuple(columns))
        else:
            conn.exec_driver_sql(statement, list(rows))
