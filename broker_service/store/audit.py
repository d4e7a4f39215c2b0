"""The audit part of ``SqlTx``: the console's audit log, appended to and read newest first."""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import insert, select

from broker_service.domain.audit.model import AuditEntry, AuditResult
from broker_service.store.part import SqlPart
from broker_service.store.schema import audit_log


class AuditPart(SqlPart):
    def append_audit(self, entry: AuditEntry) -> int:
        result = self.conn.execute(
            insert(audit_log).values(
                at=entry.at,
                access_key=entry.access_key,
                action=entry.action,
                subject=entry.subject,
                detail=orjson.dumps(entry.detail).decode() if entry.detail else None,
                result=entry.result.value,
            )
        )
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])

    def audit_entries(self, subject: str | None, limit: int) -> list[AuditEntry]:
        query = select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
        if subject is not None:
            query = query.where(audit_log.c.subject == subject)
        return [_entry(row._mapping) for row in self.conn.execute(query)]


def _entry(row: Any) -> AuditEntry:
    detail = orjson.loads(row["detail"]) if row["detail"] else {}
    return AuditEntry(
        at=int(row["at"]),
        access_key=str(row["access_key"]),
        action=str(row["action"]),
        subject=str(row["subject"]),
        result=AuditResult(row["result"]),
        detail=detail if isinstance(detail, dict) else {"value": detail},
        id=int(row["id"]),
    )
