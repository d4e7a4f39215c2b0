"""``/v1/producer-groups``: heartbeats (check-back requests come with the check-back scheduler)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from broker_service.api.deps import MetricsDep, SettingsDep, TransactionsDep
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.params import GroupName
from broker_service.api.schemas.checks import HeartbeatIn, HeartbeatOut

router = APIRouter(
    prefix="/v1/producer-groups", tags=["producer groups"], responses=ERROR_RESPONSES
)


@router.post("/{group}/heartbeat", response_model=HeartbeatOut)
async def heartbeat(
    group: GroupName,
    body: HeartbeatIn,
    request: Request,
    service: TransactionsDep,
    metrics: MetricsDep,
    settings: SettingsDep,
) -> HeartbeatOut:
    """An instance is live while its last heartbeat is younger than producer_expiry_seconds.
    A ``callback_url`` must name the address the heartbeat comes from, or a host the broker's
    ``callback_hosts`` allows (403 ``CALLBACK_NOT_ALLOWED``)."""
    access_key = getattr(request.state, "access_key", None)
    source = request.client.host if request.client else None
    await service.heartbeat(
        group, body.client_id, body.callback_url, body.topics, access_key, source
    )
    metrics.heartbeats.inc()
    return HeartbeatOut(
        producer_group=group,
        client_id=body.client_id,
        expires_in_seconds=settings.producer_expiry_seconds,
    )
