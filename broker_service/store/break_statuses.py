"""The break-status part of ``SqlTx``: an operator's word on each break of the nightly
reconciliation, upserted by the console, read by break id (the job reads the table itself)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from broker_service.domain.ports.breaks import BreakStatus
from broker_service.store.part import SqlPart
from broker_service.store.schema import reconcile_break_statuses as statuses

_CHUNK = 500  # ids per IN list: well under SQLite's limit of bound parameters


class BreakStatusPart(SqlPart):
    def set_break_status(self, status: BreakStatus) -> None:
        values = {
            "break_id": status.break_id,
            "status": status.status,
            "note": status.note,
            "kind": status.kind,
            "report": status.report,
            "actor": status.actor,
            "updated_at": status.updated_at,
        }
        stmt = self._insert()(statuses).values(**values)
        changed = {name: stmt.excluded[name] for name in values if name != "break_id"}
        self.conn.execute(stmt.on_conflict_do_update(index_elements=["break_id"], set_=changed))

    def break_statuses(self, break_ids: Sequence[str]) -> dict[str, BreakStatus]:
        found: dict[str, BreakStatus] = {}
        ids = list(dict.fromkeys(break_ids))
        for i in range(0, len(ids), _CHUNK):
            query = select(statuses).where(statuses.c.break_id.in_(ids[i : i + _CHUNK]))
            for row in self.conn.execute(query):
                found[row.break_id] = BreakStatus(
                    break_id=row.break_id,
                    status=row.status,
                    note=row.note,
                    kind=row.kind,
                    report=row.report,
                    actor=row.actor,
                    updated_at=int(row.updated_at),
                )
        return found
