"""Mounting the console on the broker's app: its routes, its state, and the session check the
ACL gate asks on ``/console`` paths (``app.state.console_sessions``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Response

from broker_service.acl.runtime import AclRuntime
from broker_service.api import permissions as rules
from broker_service.api.permissions import needs
from broker_service.console import views
from broker_service.console.auditing import Auditor, action_of
from broker_service.console.routes import (
    audit,
    groups,
    login,
    messages,
    overview,
    reconciliation,
    topics,
    transactions,
)
from broker_service.console.routes.common import router
from broker_service.console.sessions import (
    ConsoleSessions,
    LoginThrottle,
    SessionSigner,
    session_key,
)
from broker_service.console.web import Console, static_file, templates
from broker_service.domain.audit.model import AuditResult
from broker_service.domain.audit.service import AuditService
from broker_service.metrics import BrokerMetrics
from broker_service.settings import BrokerSettings

# Imported for the routes they add to ``router``.
_PAGES = (audit, groups, login, messages, overview, reconciliation, topics, transactions)


def mount_console(
    app: FastAPI,
    settings: BrokerSettings,
    *,
    audit_log: AuditService,
    metrics: BrokerMetrics,
    acl: AclRuntime | None,
) -> None:
    signer = SessionSigner(
        session_key(settings.console_session_secret), settings.console_session_hours * 3600
    )
    auditor = Auditor(audit_log, metrics)

    async def refused(scope: Any, access_key: str, code: str) -> None:
        action, subject = action_of(scope["path"])
        await auditor.record(access_key, action, subject, AuditResult.REFUSED, {"code": code})

    app.state.console = Console(
        settings=settings,
        acl=acl,
        signer=signer,
        auditor=auditor,
        throttle=LoginThrottle(),
        templates=templates(),
        rates=views.Rates(metrics),
        topic_rates=views.TopicRates(),
    )
    app.state.console_sessions = ConsoleSessions(signer, acl, refused)
    app.include_router(router)
    app.add_api_route("/favicon.ico", favicon, methods=["GET"], include_in_schema=False)


@needs(rules.public)
async def favicon() -> Response:
    """The console's icon where a browser looks for one by itself: answered, not refused (a 401
    and a log line per page otherwise)."""
    return Response(
        static_file("favicon.svg"),
        media_type="image/svg+xml",
        headers={"Cache-Control": "max-age=86400", "X-Content-Type-Options": "nosniff"},
    )
