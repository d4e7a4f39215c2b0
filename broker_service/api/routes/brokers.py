"""``/v1/brokers``: the brokers sharing this broker's store, and which of them are live (admin
only: it reveals the topology)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from broker_service.api import permissions as rules
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.permissions import needs
from broker_service.api.schemas.brokers import BrokerOut, BrokersOut
from broker_service.api.schemas.common import rfc3339
from broker_service.domain.brokers.model import BrokerSeen
from broker_service.domain.brokers.service import PresenceService

router = APIRouter(prefix="/v1/brokers", tags=["operations"], responses=ERROR_RESPONSES)


def broker_out(seen: BrokerSeen) -> BrokerOut:
    p = seen.presence
    return BrokerOut(
        broker_id=p.broker_id,
        address=p.address,
        version=p.version,
        store=p.store_kind,
        started_at=rfc3339(p.started_at) or "",
        last_seen_at=rfc3339(p.last_seen_at) or "",
        seen_seconds_ago=seen.seen_ms_ago / 1000,
        live=seen.live,
    )


@router.get("", response_model=BrokersOut)
@needs(rules.admin)
async def list_brokers(request: Request) -> BrokersOut:
    """Every broker whose beat the store holds (one not seen for a day is forgotten): live when
    seen within three beats, else when it was last seen."""
    presence: PresenceService = request.app.state.presence
    found = await presence.brokers()
    return BrokersOut(
        brokers=[broker_out(b) for b in found], beat_seconds=presence.interval_ms / 1000
    )
