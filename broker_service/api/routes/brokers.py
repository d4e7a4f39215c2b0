"""``/v1/brokers``: the brokers sharing this broker's store, and which of them are live (admin
only: it reveals the topology)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from broker_service.api import convert
from broker_service.api import permissions as rules
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.permissions import needs
from broker_service.api.schemas.brokers import BrokersOut
from broker_service.domain.brokers.service import PresenceService

router = APIRouter(prefix="/v1/brokers", tags=["operations"], responses=ERROR_RESPONSES)


@router.get("", response_model=BrokersOut)
@needs(rules.admin)
async def list_brokers(request: Request) -> BrokersOut:
    """Every broker whose beat the store holds (one not seen for a day is forgotten): live when
    seen within three beats, else when it was last seen."""
    presence: PresenceService = request.app.state.presence
    found = await presence.brokers()
    return BrokersOut(
        brokers=[convert.broker_out(b) for b in found], beat_seconds=presence.interval_ms / 1000
    )
