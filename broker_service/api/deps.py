"""Dependencies the routes declare (``Annotated`` aliases), and the same read straight from the
request for the hot routes.

FastAPI solves every declared dependency on every request, through machinery that costs more than
the dependency: on the transactions load (a half and a commit per transaction) dropping
``ServiceDep`` and ``MetricsDep`` from those two routes took the event loop's CPU per transaction
from 749-816 to 656-659 us and the rate up 13-19 % in interleaved runs.  So the sending and
resolving routes take the ``Request`` and call :func:`service_of` and :func:`metrics_of`; the
others declare the aliases, which read better.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from broker_service.api.metrics import BrokerMetrics
from broker_service.domain.service import BrokerService
from broker_service.settings import BrokerSettings


def service_of(request: Request) -> BrokerService:
    service: BrokerService = request.app.state.service
    return service


def metrics_of(request: Request) -> BrokerMetrics:
    metrics: BrokerMetrics = request.app.state.metrics
    return metrics


async def get_service(request: Request) -> BrokerService:
    return service_of(request)


async def get_metrics(request: Request) -> BrokerMetrics:
    return metrics_of(request)


async def get_settings(request: Request) -> BrokerSettings:
    settings: BrokerSettings = request.app.state.settings
    return settings


ServiceDep = Annotated[BrokerService, Depends(get_service)]
MetricsDep = Annotated[BrokerMetrics, Depends(get_metrics)]
SettingsDep = Annotated[BrokerSettings, Depends(get_settings)]
