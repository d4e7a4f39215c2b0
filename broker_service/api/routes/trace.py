"""``POST /v1/trace``: the clients' own trace reports (what sending and consuming cost them)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from broker_service.api import permissions as rules
from broker_service.api.deps import ConsumersDep, nonce_of
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.permissions import needs, trace_guard
from broker_service.api.schemas.common import ErrorBody
from broker_service.api.schemas.trace import ClientTraceIn, ClientTraceOut, ClientTraceRefusalOut

router = APIRouter(tags=["messages"], responses=ERROR_RESPONSES)


@router.post("/v1/trace", response_model=ClientTraceOut)
@needs(rules.signed_in)
async def record_trace(
    body: ClientTraceIn, request: Request, consumers: ConsumersDep
) -> ClientTraceOut:
    """Record the framework's reports as CLIENT_PUB / CLIENT_SUB events of each message's trace.
    Each event stands alone: one for an unknown message (``MESSAGE_NOT_FOUND``) or, with the ACL
    on, for a message the account could not have sent (PUB on its topic and producer group) or
    received (SUB on its topic and the consumer group) is refused by its index, the others are
    kept.  With the broker's ``trace`` setting off: 200, ``recorded`` 0."""
    records = [event.to_record() for event in body.events]
    answer = await consumers.record_client_trace(
        records, trace_guard(request), nonce=nonce_of(request)
    )
    return ClientTraceOut(
        recorded=answer.recorded,
        refused=[
            ClientTraceRefusalOut(index=r.index, error=ErrorBody(code=r.code, message=r.message))
            for r in answer.refused
        ],
    )
