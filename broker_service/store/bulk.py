"""INSERT of many rows, in as few driver calls as the database allows.

The hot path of the store -- the messages of a group commit, the deliveries of a receive -- skips
SQLAlchemy's per-row parameter processing: the statement text is made once per dialect, and rows are
plain tuples of driver values (ints, strs, bytes, None).

* SQLite: the driver's ``executemany`` (one prepared statement stepped per row, in C).
* PostgreSQL: from ``UNNEST_FROM`` rows on, one statement for the whole set,
  ``INSERT ... SELECT * FROM unnest(%s::type[], ...)`` with one array per column; below that, the
  driver's ``executemany`` (one row: a plain execute).  For the client both cost about the same
  from a few dozen rows on (psycopg dumps arrays element by element in Python), but one statement
  instead of one per row spares the server; for a handful of rows the arrays cost more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table

_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s", "numeric": ":{n}"}
UNNEST_FROM = 16


class BulkInsert:
    def __init__(self, table: Table, columns: Sequence[str]) -> None:
        self.table = table
        self.columns = tuple(columns)
        self._text: dict[tuple[str, bool], str] = {}

    def _statement(self, conn: Connection, unnest: bool) -> str:
        dialect = conn.dialect
        text = self._text.get((dialect.name, unnest))
        if text is None:
            quote = dialect.identifier_preparer.quote
            names = ", ".join(quote(c) for c in self.columns)
            if unnest:
                arrays = ", ".join(
                    f"%s::{self.table.c[c].type.compile(dialect=dialect)}[]" for c in self.columns
                )
                source = f"SELECT * FROM unnest({arrays})"
            else:
                placeholder = _PLACEHOLDERS[dialect.paramstyle]
                marks = ", ".join(placeholder.format(n=n + 1) for n in range(len(self.columns)))
                source = f"VALUES ({marks})"
            text = f"INSERT INTO {quote(self.table.name)} ({names}) {source}"
            self._text[(dialect.name, unnest)] = text
        return text

    def execute(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        unnest = conn.dialect.name == "postgresql" and len(rows) >= UNNEST_FROM
        statement = self._statement(conn, unnest)
        if unnest:
            columns = [list(values) for values in zip(*rows, strict=True)]
            conn.exec_driver_sql(statement, tuple(columns))
        elif len(rows) == 1:
            conn.exec_driver_sql(statement, tuple(rows[0]))
        else:
            conn.exec_driver_sql(statement, list(rows))
