"""Dependencies the routes declare (``Annotated`` aliases), and the same read straight from the
request for the hot routes.

FastAPI solves every declared dependency on every request, through machinery that costs more than
the dependency itself: on the transactions load (a half and a commit per transaction) it was a
measurable share of the event loop's CPU (bench/README.md, "Figures, fifth round": the routes
that read the service and metrics from the request).  So the sending and resolving routes take
the ``Request`` and call :func:`transactions_of`, :func:`messages_of` and :func:`metrics_of`; the
others declare the aliases, which read better.

A route that writes hands the service it calls the signed request's nonce, :func:`nonce_of`
(:mod:`broker_service.domain.ports.nonces`): its first write remembers it.

What they read is what :func:`broker_service.api.app.create_app` was handed (``app.state``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.messages.service import MessageService
from broker_service.domain.ports import RequestNonce
from broker_service.domain.transactions.service import TransactionService
from broker_service.metrics import BrokerMetrics
from broker_service.settings import BrokerSettings


def transactions_of(request: Request) -> TransactionService:
    service: TransactionService = request.app.state.transactions
    return service


def messages_of(request: Request) -> MessageService:
    service: MessageService = request.app.state.messages
    return service


def nonce_of(request: Request) -> RequestNonce | None:
    """The signed request's nonce, as the ACL gate left it; None without the ACL."""
    nonce: RequestNonce | None = request.scope.get("state", {}).get("nonce")
    return nonce


def metrics_of(request: Request) -> BrokerMetrics:
    metrics: BrokerMetrics = request.app.state.metrics
    return metrics


async def get_transactions(request: Request) -> TransactionService:
    return transactions_of(request)


async def get_messages(request: Request) -> MessageService:
    return messages_of(request)


async def get_consumers(request: Request) -> ConsumerService:
    service: ConsumerService = request.app.state.consumers
    return service


async def get_metrics(request: Request) -> BrokerMetrics:
    return metrics_of(request)


async def get_settings(request: Request) -> BrokerSettings:
    settings: BrokerSettings = request.app.state.settings
    return settings


TransactionsDep = Annotated[TransactionService, Depends(get_transactions)]
MessagesDep = Annotated[MessageService, Depends(get_messages)]
ConsumersDep = Annotated[ConsumerService, Depends(get_consumers)]
MetricsDep = Annotated[BrokerMetrics, Depends(get_metrics)]
SettingsDep = Annotated[BrokerSettings, Depends(get_settings)]
