"""INSERT of many rows, in as few driver calls as the database allows.

The hot path of the store -- the messages of a group commit, the deliveries of a receive -- skips
SQLAlchemy's per-row parameter processing: rows are plain tuples of driver values (ints, strs,
bytes, None) in ``columns`` order.

* SQLite: multi-row ``INSERT ... VALUES (...), (...), ...`` statements, as few as possible.  Not
  the driver's ``executemany``: it steps one row at a time and lets go of the GIL around each
  step, and a thread that lets go of the GIL waits for the switch interval (5 ms) to get it back
  while the event loop is busy: beside a busy Python thread, executemany is far
  slower than one multi-row statement (bench/README.md, "Figures, third round", SQLite bulk
  inserts).  A batch is cut into at most two statements past the full ones (see
  :func:`chunk_sizes`), from a few dozen statement texts the driver keeps prepared.
* PostgreSQL: ``COPY ... FROM STDIN`` inside the current transaction: the least client CPU, as
  rows are formatted in psycopg's C extension, where executemany builds and sends one statement
  per row and ``INSERT ... SELECT FROM unnest(arrays)`` dumps arrays element by element in Python
  (bench/README.md, "Figures, second round", bulk inserts by COPY).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Table

from broker_service.store.fastpath import driver_errors

_SQLITE_MAX_ROWS = 1024


_STEP = 32


def chunk_sizes(count: int, largest: int, step: int = _STEP) -> Iterator[int]:
    """``count`` cut into as many ``largest`` as fit, then at most two statements: a multiple of
    ``step`` and what is left (fewer than ``step``).  400 with 1024 is 384, 16; 800 is 800.

    Few statements per flush, because each one lets go of the GIL around its step and the writer
    then waits to get it back from a busy event loop (measured on batch sends: bench/README.md,
    "Figures, fifth round", at most two insert statements).  Few statement texts, ``largest / step``
    multiples and ``step - 1`` rests (63 for 1,024 and 32), because the driver keeps prepared
    statements in a cache of 128 for every table's inserts and all other statements: the few
    a steady load uses stay in it."""
    step = min(step, largest)
    full, rest = divmod(count, largest)
    yield from itertools.repeat(largest, full)
    steps, rest = divmod(rest, step)
    if steps:
        yield steps * step
    if rest:
        yield rest


class BulkInsert:
    def __init__(self, table: Table, columns: Sequence[str]) -> None:
        self.table = table
        self.columns = tuple(columns)
        self._copy: str | None = None
        self._values: dict[int, str] = {}  # SQLite: statement text by rows per statement
        self._largest = 0  # SQLite: rows per statement at most, a power of two

    def _rows_per_statement(self, dbapi_conn: Any) -> int:
        if not self._largest:
            # As many as the library's parameter limit allows (32,766 since SQLite 3.32).
            limit = dbapi_conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
            largest = max(1, min(_SQLITE_MAX_ROWS, limit // len(self.columns)))
            self._largest = 1 << (largest.bit_length() - 1)
        return self._largest

    def _head(self, conn: Connection) -> tuple[str, str]:
        quote = conn.dialect.identifier_preparer.quote
        return quote(self.table.name), ", ".join(quote(c) for c in self.columns)

    def _copy_statement(self, conn: Connection) -> str:
        if self._copy is None:
            table, names = self._head(conn)
            self._copy = f"COPY {table} ({names}) FROM STDIN"
        return self._copy

    def _values_statement(self, conn: Connection, rows: int) -> str:
        text = self._values.get(rows)
        if text is None:
            table, names = self._head(conn)
            row = "(" + ", ".join(["?"] * len(self.columns)) + ")"  # pysqlite: qmark
            text = f"INSERT INTO {table} ({names}) VALUES " + ", ".join([row] * rows)
            self._values[rows] = text
        return text

    def execute(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        if conn.dialect.name == "postgresql":
            self._copy_rows(conn, rows)
        else:
            self._insert_values(conn, rows)

    def _insert_values(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        dbapi_conn: Any = conn.connection.dbapi_connection
        cursor = dbapi_conn.cursor()
        try:
            start = 0
            for size in chunk_sizes(len(rows), self._rows_per_statement(dbapi_conn)):
                statement = self._values_statement(conn, size)
                with driver_errors(conn, statement):
                    cursor.execute(
                        statement, list(itertools.chain.from_iterable(rows[start : start + size]))
                    )
                start += size
        finally:
            cursor.close()

    def _copy_rows(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        statement = self._copy_statement(conn)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            with driver_errors(conn, statement), cursor.copy(statement) as copy:
                for row in rows:
                    copy.write_row(row)
        finally:
            cursor.close()
