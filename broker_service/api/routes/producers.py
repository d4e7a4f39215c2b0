"""``/v1/producer-groups``: heartbeats (check-back requests come with the check-back scheduler)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from broker_service.api import permissions as rules
from broker_service.api.deps import MetricsDep, SettingsDep, TransactionsDep, nonce_of
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.hardening import callback_limits
from broker_service.api.params import GroupName
from broker_service.api.permissions import PUB, needs
from broker_service.api.schemas.checks import HeartbeatIn, HeartbeatOut

router = APIRouter(
    prefix="/v1/producer-groups", tags=["producer groups"], responses=ERROR_RESPONSES
)


@router.post("/{group}/heartbeat", response_model=HeartbeatOut)
@needs(rules.path_group(PUB))
async def heartbeat(
    group: GroupName,
    body: HeartbeatIn,
    request: Request,
    service: TransactionsDep,
    metrics: MetricsDep,
    settings: SettingsDep,
) -> HeartbeatOut:
    """An instance is live while its last heartbeat is younger than producer_expiry_seconds.
    A ``callback_url`` must name the address the heartbeat comes from (the peer's: forwarded
    headers count only from the proxies ``forwarded_allow_ips`` names), or a host the broker's
    ``callback_hosts`` allows, on a port that is none of the broker's own listeners or its
    store's and is one of ``callback_ports`` when that is set (403 ``CALLBACK_NOT_ALLOWED``)."""
    access_key = getattr(request.state, "access_key", None)
    source = request.client.host if request.client else None
    limits = None
    if body.callback_url is not None:
        limits = callback_limits(settings, request.scope.get("server"))
    await service.heartbeat(
        group,
        body.client_id,
        body.callback_url,
        body.topics,
        access_key,
        source,
        limits,
        nonce=nonce_of(request),
    )
    metrics.heartbeats.inc()
    return HeartbeatOut(
        producer_group=group,
        client_id=body.client_id,
        expires_in_seconds=settings.producer_expiry_seconds,
    )
