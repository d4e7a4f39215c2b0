"""Dependencies the routes declare (``Annotated`` aliases)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from broker_service.api.metrics import BrokerMetrics
from broker_service.domain.service import BrokerService
from broker_service.settings import BrokerSettings


async def get_service(request: Request) -> BrokerService:
    service: BrokerService = request.app.state.service
    return service


async def get_metrics(request: Request) -> BrokerMetrics:
    metrics: BrokerMetrics = request.app.state.metrics
    return metrics


async def get_settings(request: Request) -> BrokerSettings:
    settings: BrokerSettings = request.app.state.settings
    return settings


ServiceDep = Annotated[BrokerService, Depends(get_service)]
MetricsDep = Annotated[BrokerMetrics, Depends(get_metrics)]
SettingsDep = Annotated[BrokerSettings, Depends(get_settings)]
