"""The console's audit log: every action, and every refusal of one, is a row (who, when, what,
the result) and a count in ``halfmq_audit_actions``."""

from __future__ import annotations

import logging
from typing import Any

from broker_service.domain.audit.model import ANONYMOUS, AuditEntry, AuditResult
from broker_service.domain.audit.service import AuditService
from broker_service.domain.errors import DomainError
from broker_service.metrics import BrokerMetrics

log = logging.getLogger("halfmq.console")

# The action a console POST path names, by its last segment (the subject is the rest).
_ACTIONS = {
    "commit": "commit",
    "rollback": "rollback",
    "check": "check_now",
    "delete": "delete_topic",
    "reset-offset": "reset_offset",
    "resend": "resend_dead_letter",
    "topics": "create_topic",
    "login": "login",
    "logout": "logout",
    "status": "set_break_status",
}


def action_of(path: str) -> tuple[str, str]:
    """``(action, subject)`` of a console POST path, for refusals (nothing was read).  A path
    that is no action is ``unknown``: a URL never becomes a metric label."""
    parts = [p for p in path.split("/") if p][1:]  # without "console"
    action = _ACTIONS.get(parts[-1], "unknown") if parts else "unknown"
    if parts[:1] == ["transactions"] and len(parts) > 1:
        return action, f"transaction:{parts[1]}"
    if parts[:1] == ["topics"]:
        return action, "topics"
    if parts[:1] == ["consumer-groups"] and len(parts) > 1:
        return action, f"consumer-group:{parts[1]}"
    if parts[:1] == ["reconciliation"] and parts[2:3] == ["breaks"] and len(parts) > 3:
        return action, f"break:{parts[3]}"
    return action, "console"


class Auditor:
    def __init__(self, service: AuditService, metrics: BrokerMetrics) -> None:
        self.service = service
        self.metrics = metrics

    async def record(
        self,
        access_key: str | None,
        action: str,
        subject: str,
        result: AuditResult,
        detail: dict[str, Any] | None = None,
    ) -> AuditEntry | None:
        """Write the entry and count it; a store that fails to take it is logged, not raised
        (the action itself is already done or refused)."""
        self.metrics.audit_actions.labels(action=action, result=result.value).inc()
        try:
            return await self.service.record(
                access_key or ANONYMOUS, action, subject, result, detail
            )
        except DomainError as error:
            log.warning("audit entry %s %s not written: %s", action, subject, error.code)
            return None

    async def entries(self, subject: str | None = None, limit: int = 100) -> list[AuditEntry]:
        return await self.service.entries(subject, limit)
