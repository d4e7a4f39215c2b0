"""Operations: liveness, readiness, Prometheus metrics, and an echo route for benchmarks."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker_service.api import permissions as rules
from broker_service.api.deps import MetricsDep, SettingsDep
from broker_service.api.errors import ERROR_RESPONSES, envelope
from broker_service.api.permissions import needs
from broker_service.api.schemas.common import AnyJson, EchoOut
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.ports import StoreProbe
from broker_service.domain.transactions.service import TransactionService
from broker_service.metrics import Backlog, Readings

log = logging.getLogger("halfmq.metrics")
router = APIRouter(tags=["operations"])

PENDING_AGES = (0, 6, 60, 600, 3600, 86400)


@router.get("/healthz")
@needs(rules.public)
async def healthz() -> dict[str, str]:
    """The process is alive (says nothing of the store)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: ERROR_RESPONSES[503]})
@needs(rules.public)
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
@needs(rules.admin)
async def metrics_text(request: Request, metrics: MetricsDep, settings: SettingsDep) -> Response:
    """Always answers: a store that cannot be read leaves its families out (see
    :class:`~broker_service.metrics.StoreReadings`) and shows as not ready; with the ``metrics``
    setting off the store is not read at all."""
    store: StoreProbe = request.app.state.store
    stats = store.stats()
    if metrics.observe:
        ready = (await store.ping()).ready
        metrics.ready.set(1 if ready else 0)
        alert_ms = int(settings.check_undelivered_alert_seconds * 1000)
        # Not ready (unreachable, or a schema to upgrade): nothing to read, every reading absent.
        metrics.readings.latest = (
            await read_the_store(
                request.app.state.transactions, request.app.state.consumers, alert_ms
            )
            if ready
            else Readings()
        )
    metrics.store_batches.set(stats["batches"])
    metrics.store_units.set(stats["units"])
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def read_the_store(
    transactions: TransactionService, consumers: ConsumerService, alert_ms: int
) -> Readings:
    """Three reads whatever the number of halves, groups and queues: the pending halves by age,
    the undelivered halves, and every group's backlog.  A scrape answers whatever the store
    does, so a read that fails (the store down, a query error) is logged and left out."""
    pending: dict[int, int] | None = None
    undelivered: int | None = None
    found: Backlog | None = None
    try:
        ages = await transactions.pending_by_age([age * 1000 for age in PENDING_AGES])
        pending = {age: ages[age * 1000] for age in PENDING_AGES}
        undelivered = await transactions.undelivered_halves(alert_ms)
    except Exception as exc:
        log.warning("metrics: the pending halves could not be read: %s", exc)
    try:
        backlog = await consumers.backlog()
        lags = [(q.group, q.topic, q.queue_id, q.messages) for q in backlog.lags]
        found = Backlog(lags, backlog.dead, backlog.retrying)
    except Exception as exc:
        log.warning("metrics: the consumer groups' backlog could not be read: %s", exc)
    return Readings(pending, undelivered, found)


@router.post("/v1/echo", response_model=EchoOut)
@needs(rules.admin)
async def echo(payload: Annotated[AnyJson, Body()] = None) -> EchoOut:
    """Diagnostic: answers its body and touches no store (the benchmarks' ceiling)."""
    return EchoOut(echo=payload)
