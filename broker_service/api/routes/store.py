"""``/v1/store``: what the store holds, and a purge round on request (admin only; ``halfmq store``
calls them).  The purge is the one the broker runs every ``purge_interval_seconds``
(docs/store.md, "Retention"); from the API it is a dry run unless asked otherwise."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from broker_service.api import permissions as rules
from broker_service.api.deps import SettingsDep, nonce_of
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.permissions import needs
from broker_service.api.schemas.common import rfc3339
from broker_service.api.schemas.store import (
    PurgeIn,
    PurgeOut,
    RetentionOut,
    StoreStatsOut,
)
from broker_service.domain.retention.model import PurgeReport
from broker_service.domain.retention.service import Pace, RetentionService
from broker_service.settings import BrokerSettings

router = APIRouter(prefix="/v1/store", tags=["store"], responses=ERROR_RESPONSES)

log = logging.getLogger("halfmq.retention")

# Most rows one purge from the API deletes; what is left waits for the next round (or request).
PURGE_MAX_ROWS = 1_000_000


async def get_retention(request: Request) -> RetentionService:
    service: RetentionService = request.app.state.retention
    return service


RetentionDep = Annotated[RetentionService, Depends(get_retention)]


def dialect(settings: BrokerSettings) -> str:
    """``sqlite`` or ``postgresql``: the URL's scheme without its driver."""
    return settings.database_url.partition(":")[0].partition("+")[0]


def retention_out(settings: BrokerSettings) -> RetentionOut:
    return RetentionOut(
        retention_hours=settings.retention_hours,
        dead_letter_retention_hours=settings.dead_letter_retention_hours,
        hard_limit_hours=settings.retention_hard_limit_hours,
        wait_for_export=settings.retention_wait_for_export,
    )


@router.get("/stats", response_model=StoreStatsOut)
@needs(rules.admin)
async def stats(service: RetentionDep, settings: SettingsDep) -> StoreStatsOut:
    """Size, rows per table, the oldest message, the export watermark, what retention expired
    per consumer group, and the retention settings."""
    found = await service.stats()
    oldest = found.oldest_message_at
    age = None if oldest is None else max(0.0, (service.clock() - oldest) / 1000)
    return StoreStatsOut(
        dialect=dialect(settings),
        size_bytes=found.size_bytes,
        free_bytes=found.free_bytes,
        rows=found.rows,
        oldest_message_at=rfc3339(oldest),
        oldest_message_age_seconds=age,
        export_watermark=rfc3339(found.export_watermark),
        expired=found.expired,
        retention=retention_out(settings),
    )


@router.post("/purge", response_model=PurgeOut)
@needs(rules.admin)
async def purge(
    service: RetentionDep,
    settings: SettingsDep,
    request: Request,
    body: PurgeIn | None = None,
) -> PurgeOut:
    """One purge round now: a dry run (the default) reports what would go and deletes nothing;
    ``{"dry_run": false}`` purges (counted into the metrics like a scheduled round).  409
    ``PURGE_RUNNING`` while another round runs, on this broker or another on the store."""
    dry_run = True if body is None else body.dry_run
    pace = Pace(share=settings.purge_share, pause=settings.purge_pause_seconds)
    report = await service.purge(
        dry_run=dry_run, max_rows=PURGE_MAX_ROWS, pace=pace, nonce=nonce_of(request)
    )
    return purge_out(report)


def purge_out(report: PurgeReport) -> PurgeOut:
    """The report's fields by their names, its expiries' and holds' too (an expiry's ``count``
    is its property)."""
    return PurgeOut.model_validate(report, from_attributes=True)
