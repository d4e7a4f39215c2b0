"""Operations: liveness, readiness, Prometheus metrics, and an echo route for benchmarks."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker_service.api.deps import MetricsDep, SettingsDep
from broker_service.api.errors import ERROR_RESPONSES, envelope
from broker_service.api.schemas.common import AnyJson, EchoOut
from broker_service.domain.ports import StoreProbe
from broker_service.domain.transactions.service import TransactionService

router = APIRouter(tags=["operations"])

PENDING_AGES = (0, 6, 60, 600, 3600, 86400)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive (says nothing of the store)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: ERROR_RESPONSES[503]})
async def readyz(request: Request, metrics: MetricsDep) -> Any:
    """Ready when the store is reachable and its schema is at the migrations' head."""
    store: StoreProbe = request.app.state.store
    readiness = await store.ping()
    metrics.ready.set(1 if readiness.ready else 0)
    if not readiness.ready:
        return envelope(503, "NOT_READY", readiness.reason)
    return {"status": "ready"}


@router.get(
    "/metrics",
    response_class=Response,
    # With the ACL on, an admin's unless acl_public_ops opens it to scrapers without keys.
    responses={code: ERROR_RESPONSES[code] for code in (401, 403, 503)},
)
async def metrics_text(request: Request, metrics: MetricsDep, settings: SettingsDep) -> Response:
    store: StoreProbe = request.app.state.store
    stats = store.stats()
    service: TransactionService = request.app.state.transactions
    ages = await service.pending_by_age([age * 1000 for age in PENDING_AGES])
    for age in PENDING_AGES:
        metrics.pending.labels(older_than_seconds=str(age)).set(ages[age * 1000])
    alert_ms = int(settings.check_undelivered_alert_seconds * 1000)
    metrics.undelivered.set(await service.undelivered_halves(alert_ms))
    metrics.store_batches.set(stats["batches"])
    metrics.store_units.set(stats["units"])
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.post("/v1/echo", response_model=EchoOut)
async def echo(payload: Annotated[AnyJson, Body()] = None) -> EchoOut:
    """Diagnostic: answers its body and touches no store (the benchmarks' ceiling)."""
    return EchoOut(echo=payload)
