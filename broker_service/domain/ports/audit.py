"""The store's audit role: the console's audit log (:mod:`broker_service.domain.audit`)."""

from __future__ import annotations

from typing import Protocol

from broker_service.domain.audit.model import AuditEntry


class AuditStore(Protocol):
    def append_audit(self, entry: AuditEntry) -> int:
        """Store ``entry``; its new id."""
        ...

    def audit_entries(self, subject: str | None, limit: int) -> list[AuditEntry]:
        """The newest ``limit`` entries (about ``subject`` only, when given), newest first."""
        ...
