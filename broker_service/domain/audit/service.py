"""``AuditService``: write and read the audit log (one unit of work each).

The log is not purged by retention: an operator's actions are few (a row each) and the question
"who committed this by hand?" may come long after the message itself is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from broker_service.domain.audit.model import AuditEntry, AuditResult
from broker_service.domain.clock import now_ms
from broker_service.domain.ports import Store

MAX_LIMIT = 1000
# The longest access key, action and subject an entry keeps (the store's columns); longer is cut.
MAX_KEY, MAX_ACTION, MAX_SUBJECT = 128, 64, 512


class AuditService:
    def __init__(self, store: Store, clock: Callable[[], int] = now_ms) -> None:
        self.store = store
        self.clock = clock

    async def record(
        self,
        access_key: str,
        action: str,
        subject: str,
        result: AuditResult,
        detail: dict[str, Any] | None = None,
    ) -> AuditEntry:
        entry = AuditEntry(
            self.clock(),
            access_key[:MAX_KEY],
            action[:MAX_ACTION],
            subject[:MAX_SUBJECT],
            result,
            detail or {},
        )
        new_id = await self.store.write(lambda tx: tx.append_audit(entry))
        return replace(entry, id=new_id)

    async def entries(self, subject: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """The newest first; ``subject``: only those about it."""
        limit = max(1, min(limit, MAX_LIMIT))
        return await self.store.read(lambda tx: tx.audit_entries(subject, limit))
