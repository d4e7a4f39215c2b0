"""Check-back over REST: pull checks, producer groups, and an operator's "check again now"."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status

from broker_service.api import convert
from broker_service.api import permissions as rules
from broker_service.api.deps import MetricsDep, SettingsDep, TransactionsDep, nonce_of
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.params import GroupName, IdPath, TextQuery
from broker_service.api.permissions import PUB, needs
from broker_service.api.schemas.checks import CheckOut, ChecksOut, InstanceOut, ProducerGroupOut
from broker_service.api.schemas.common import rfc3339
from broker_service.api.schemas.transactions import TransactionOut
from broker_service.domain.transactions.checkback import check_payload
from broker_service.domain.transactions.pulls import PullHub

router = APIRouter(tags=["check-back"], responses=ERROR_RESPONSES)


def _hub(request: Request) -> PullHub:
    hub: PullHub = request.app.state.pull_hub
    return hub


@router.get("/v1/producer-groups/{group}/checks", response_model=ChecksOut)
@needs(rules.path_group(PUB))
async def pull_checks(
    group: GroupName,
    request: Request,
    service: TransactionsDep,
    metrics: MetricsDep,
    client_id: TextQuery,
    max: Annotated[int, Query(ge=1, le=1000)] = 32,
    wait_seconds: Annotated[float, Query(ge=0, le=60)] = 20,
) -> ChecksOut:
    """Long-poll for the checks assigned to this instance (pull mode); answer each with a commit or
    rollback carrying ``"from_check": true``.  Returns as soon as checks are there, or empty."""
    hub = _hub(request)
    event = hub.event(group, client_id)
    deadline = time.monotonic() + wait_seconds
    nonce = nonce_of(request)  # taken by the first look: the later ones are the same request's
    try:
        while True:
            event.clear()
            checks = await service.pull_checks(group, client_id, max, nonce=nonce)
            remaining = deadline - time.monotonic()
            if checks or remaining <= 0:
                break
            # Woken at once by this broker's scheduler; another broker's assignments are found
            # by looking again at most a second later.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=min(1.0, remaining))
    finally:
        hub.release(group, client_id)
    metrics.checks.labels(outcome="pulled").inc(len(checks))
    return ChecksOut(checks=[CheckOut.model_validate(check_payload(c)) for c in checks])


@router.get("/v1/producer-groups/{group}", response_model=ProducerGroupOut)
@needs(rules.path_group(PUB))
async def get_producer_group(
    group: GroupName, service: TransactionsDep, settings: SettingsDep
) -> ProducerGroupOut:
    """The group's instances as their heartbeats describe them."""
    instances = await service.producer_group(group)
    now = service.clock()
    live_since = now - int(settings.producer_expiry_seconds * 1000)
    return ProducerGroupOut(
        producer_group=group,
        instances=[
            InstanceOut(
                client_id=i.client_id,
                callback_url=i.callback_url,
                mode="push" if i.push else "pull",
                topics=list(i.topics),
                last_heartbeat_at=rfc3339(i.last_heartbeat_at) or "",
                live=i.last_heartbeat_at >= live_since,
                reachable=i.reachable(now),
                unreachable_until=rfc3339(i.unreachable_until),
                last_error=i.last_error,
                last_error_at=rfc3339(i.last_error_at),
            )
            for i in instances
        ],
    )


@router.delete("/v1/producer-groups/{group}", status_code=status.HTTP_204_NO_CONTENT)
@needs(rules.admin)
async def delete_producer_group(
    group: GroupName, service: TransactionsDep, request: Request
) -> Response:
    """Forget the group's instances.  Its pending halves are kept; rounds skip them without
    counting until an instance heartbeats again."""
    await service.delete_producer_group(group, nonce=nonce_of(request))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/v1/transactions/{transaction_id}/check", response_model=TransactionOut)
@needs(rules.admin)
async def check_now(transaction_id: IdPath, request: Request, service: TransactionsDep) -> Any:
    """Operator: check this transaction in the next round, also when it is DISCARDED (traced
    as OPERATOR_CHECK by the operator's access key, and RESUMED)."""
    actor = getattr(request.state, "access_key", None)
    record = await service.check_now(transaction_id, actor, nonce=nonce_of(request))
    wake_checks: Callable[[], None] | None = request.app.state.wake_checks
    if wake_checks is not None:
        wake_checks()
    return convert.transaction_out(record)
