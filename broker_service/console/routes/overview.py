"""The overview: the brokers sharing the store, the store, the rates, the halves waiting by age,
the dead letters (not yet resent, per group), the size."""

from __future__ import annotations

from fastapi import Request, Response

from broker_service.api import permissions as rules
from broker_service.api.permissions import needs
from broker_service.console.routes.common import router
from broker_service.console.web import console_of, is_admin, render
from broker_service.domain.brokers.service import PresenceService
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.messages.service import MessageService
from broker_service.domain.retention.service import RetentionService
from broker_service.domain.transactions.service import TransactionService

# The ages the pending halves are counted at (ms): all, a minute, ten minutes, an hour, a day.
AGES_MS = (0, 60_000, 600_000, 3_600_000, 86_400_000)


@router.get("")
@needs(rules.signed_in)
async def overview(request: Request) -> Response:
    if not is_admin(request):  # the figures are admin's; an account sees its own pages
        return render(request, "overview.html", figures=None)
    app = request.app.state
    transactions: TransactionService = app.transactions
    messages: MessageService = app.messages
    retention: RetentionService = app.retention
    pending = await transactions.pending_by_age(AGES_MS)
    topics = await messages.list_topics()
    console_of(request).topic_rates.observe(topics)  # a sample for the topics page's rates
    consumers: ConsumerService = app.consumers
    dead = (await consumers.backlog()).dead
    stats = await retention.stats()
    presence: PresenceService = app.presence
    settings = console_of(request).settings
    figures = {
        "store_kind": "SQLite" if settings.is_sqlite else "PostgreSQL",
        "brokers": await presence.brokers(),  # live ones first
        "pending": [(ms // 1000, pending.get(ms, 0)) for ms in AGES_MS],
        "dead": {group: n for group, n in sorted(dead.items()) if n},
        "dead_total": sum(dead.values()),
        "stats": stats,
        "rates": console_of(request).rates.now(),
        "topics": len(topics),
    }
    return render(request, "overview.html", figures=figures)
