"""The break-status part of ``SqlTx``: an operator's word on each break of the nightly
reconciliation, upserted by the console, read by break id (the job reads the table itself)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from sqlalchemy import select

from broker_service.domain.ports.breaks import BreakStatus
from broker_service.store.part import SqlPart
from broker_service.store.schema import reconcile_break_statuses as statuses

_CHUNK = 500  # ids per IN list: well under SQLite's limit of bound parameters


class BreakStatusPart(SqlPart):
    # A status's row has the record's fields for columns.

    def set_break_status(self, status: BreakStatus) -> None:
        self._upsert(statuses, "break_id", asdict(status))

    def break_statuses(self, break_ids: Sequence[str]) -> dict[str, BreakStatus]:
        found: dict[str, BreakStatus] = {}
        ids = list(dict.fromkeys(break_ids))
        for i in range(0, len(ids), _CHUNK):
            query = select(statuses).where(statuses.c.break_id.in_(ids[i : i + _CHUNK]))
            for row in self.conn.execute(query):
                found[row.break_id] = BreakStatus(**row._mapping)
        return found
