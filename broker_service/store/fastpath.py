"""The store's hottest single-row statements, run on the DBAPI cursor of the current connection.

Statements are still SQLAlchemy Core constructs compiled by SQLAlchemy for the connection's dialect
(once per dialect); only their execution skips SQLAlchemy's per-call work -- the compiled-cache
lookup, parameter processing and result wrapping -- which cost more than the statement itself on
SQLite (bench/README.md, "Figures, first round", the hot statements precompiled on the cursor).
They run inside the connection's current transaction like any other statement.  Rows come back as
plain dicts keyed by column label.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple, cast

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement

_POSITIONAL = ("qmark", "format", "numeric")


class _Compiled(NamedTuple):
    text: str
    order: tuple[str, ...] | None  # parameter names in placeholder order (positional styles)
    fixed: dict[str, Any]

    def bind(self, params: Mapping[str, Any]) -> Any:
        """The driver's parameters for one execution: with the statement's own values, and in
        placeholder order for a positional paramstyle."""
        values = {**self.fixed, **params}
        return values if self.order is None else tuple(values[n] for n in self.order)


class Prepared:
    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._compiled: dict[str, _Compiled] = {}

    def _sql(self, conn: Connection) -> _Compiled:
        dialect = conn.dialect
        found = self._compiled.get(dialect.name)
        if found is None:
            compiled = cast(SQLCompiler, self.statement.compile(dialect=dialect))
            order = None
            if dialect.paramstyle in _POSITIONAL:
                order = tuple(compiled.positiontup or ())
            # Values the statement carries itself (literals compile to bound parameters).
            fixed = {
                name: bind.effective_value
                for name, bind in compiled.binds.items()
                if not bind.required
            }
            found = self._compiled[dialect.name] = _Compiled(compiled.string, order, fixed)
        return found

    def _run(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        compiled = self._sql(conn)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            with driver_errors(conn, compiled.text):
                cursor.execute(compiled.text, compiled.bind(params))
        except BaseException:
            cursor.close()
            raise
        return cursor

    def first(self, conn: Connection, params: Mapping[str, Any]) -> dict[str, Any] | None:
        cursor = self._run(conn, params)
        try:
            row = cursor.fetchone()
            if row is None:
                return None
            return dict(zip([d[0] for d in cursor.description], row, strict=True))
        finally:
            cursor.close()

    def all(self, conn: Connection, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        cursor = self._run(conn, params)
        try:
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def rowcount_many(self, conn: Connection, params: Sequence[Mapping[str, Any]]) -> int:
        """The statement once per parameter set (psycopg pipelines them: one round trip), and
        the rows they changed in all."""
        compiled = self._sql(conn)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            with driver_errors(conn, compiled.text):
                cursor.executemany(compiled.text, [compiled.bind(p) for p in params])
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def rowcount(self, conn: Connection, params: Mapping[str, Any]) -> int:
        cursor = self._run(conn, params)
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()


def rowcount_raw(conn: Connection, sql: str, params: Sequence[Any]) -> int:
    """A statement already in the driver's own SQL and paramstyle, run once; the rows it changed.
    For statements whose text varies with their input (a multi-row ``VALUES``)."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        with driver_errors(conn, sql):
            cursor.execute(sql, params)
        return int(cursor.rowcount)
    finally:
        cursor.close()


@contextmanager
def driver_errors(conn: Connection, statement: str) -> Iterator[None]:
    """The driver's errors as SQLAlchemy's (``IntegrityError``, ``DataError``, ...), as if the
    statement had gone through ``Connection.execute``: the writer and the consumer units retry
    or answer by those classes.  A lost connection is invalidated, so the pool drops it."""
    dialect = conn.dialect
    base = dialect.loaded_dbapi.Error
    try:
        yield
    except base as error:
        dbapi_conn = conn.connection.dbapi_connection
        lost = dialect.is_disconnect(error, dbapi_conn, None)
        if lost:
            conn.invalidate(error)
        raise DBAPIError.instance(
            statement, None, error, base, connection_invalidated=lost, dialect=dialect
        ) from error
