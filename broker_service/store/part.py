"""What every part of ``SqlTx`` stands on: one connection, in one transaction, and its dialect."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite


class SqlPart:
    conn: Connection
    _postgres: bool

    def _insert(self) -> Any:
        """The dialect's INSERT (for ``ON CONFLICT``)."""
        return postgresql.insert if self._postgres else sqlite.insert

    def _upsert(self, table: Table, key: str, values: Mapping[str, Any]) -> None:
        """Insert ``values`` as a row of ``table``; where a row has that ``key`` already, set
        its other columns to them instead."""
        stmt = self._insert()(table).values(**values)
        changed = {name: stmt.excluded[name] for name in values if name != key}
        self.conn.execute(stmt.on_conflict_do_update(index_elements=[key], set_=changed))
