"""Check-back over REST: pull checks, producer groups, and an operator's "check again now"."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from pydantic import BaseModel, Field

from broker_service.api import convert
from broker_service.api.deps import MetricsDep, ServiceDep, SettingsDep
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.params import GroupName, IdPath, TextQuery
from broker_service.api.schemas import TransactionOut, rfc3339
from broker_service.domain.checkback import CheckBack
from broker_service.schedulers.checkback import PullHub, check_payload

router = APIRouter(tags=["check-back"], responses=ERROR_RESPONSES)


class CheckOut(BaseModel):
    transaction_id: str
    producer_group: str
    msg_id: str
    topic: str
    tags: str | None = None
    keys: list[str] = Field(default_factory=list)
    body: str
    encoding: str
    properties: dict[str, str] = Field(default_factory=dict)
    check_times: int


class ChecksOut(BaseModel):
    checks: list[CheckOut]


class InstanceOut(BaseModel):
    client_id: str
    callback_url: str | None
    mode: str = Field(description="push (callback_url) or pull")
    topics: list[str]
    last_heartbeat_at: str
    live: bool
    reachable: bool = Field(
        description="False while a check that could not be delivered keeps it aside"
    )
    unreachable_until: str | None = None
    last_error: str | None = Field(None, description="Why a check last failed to reach it")
    last_error_at: str | None = None


class ProducerGroupOut(BaseModel):
    producer_group: str
    instances: list[InstanceOut]


def _checkback(request: Request) -> CheckBack:
    checkback: CheckBack = request.app.state.checkback
    return checkback


def _hub(request: Request) -> PullHub:
    hub: PullHub = request.app.state.pull_hub
    return hub


@router.get("/v1/producer-groups/{group}/checks", response_model=ChecksOut)
async def pull_checks(
    group: GroupName,
    request: Request,
    service: ServiceDep,
    metrics: MetricsDep,
    client_id: TextQuery,
    max: Annotated[int, Query(ge=1, le=1000)] = 32,
    wait_seconds: Annotated[float, Query(ge=0, le=60)] = 20,
) -> ChecksOut:
    """Long-poll for the checks assigned to this instance (pull mode); answer each with a commit or
    rollback carrying ``"from_check": true``.  Returns as soon as checks are there, or empty."""
    checkback, hub = _checkback(request), _hub(request)
    event = hub.event(group, client_id)
    deadline = time.monotonic() + wait_seconds
    try:
        while True:
            event.clear()
            checks = await service.pull_checks(checkback, group, client_id, max)
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
async def get_producer_group(
    group: GroupName, service: ServiceDep, settings: SettingsDep
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
async def delete_producer_group(group: GroupName, service: ServiceDep) -> Response:
    """Forget the group's instances.  Its pending halves are kept; rounds skip them without
    counting until an instance heartbeats again."""
    await service.delete_producer_group(group)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/v1/transactions/{transaction_id}/check", response_model=TransactionOut)
async def check_now(transaction_id: IdPath, request: Request, service: ServiceDep) -> Any:
    """Operator: check this transaction in the next round, also when it is DISCARDED."""
    record = await service.check_now(_checkback(request), transaction_id)
    scheduler = getattr(request.app.state, "scheduler", None)
    if scheduler is not None:
        scheduler.wake()
    return convert.transaction_out(record)
