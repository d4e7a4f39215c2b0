"""What every part of ``SqlTx`` stands on: one connection, in one transaction, and its dialect."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite


class SqlPart:
    conn: Connection
    _postgres: bool

    def _insert(self) -> Any:
        """The dialect's INSERT (for ``ON CONFLICT``)."""
        return postgresql.insert if self._postgres else sqlite.insert
