"""Producer groups (live instances, last heartbeat, callback or pull) and consumer groups
(members, lag per topic and queue, retries and dead letters, offset reset, the DLQ and resend).

The store keeps no list of producer groups: their index lists the groups of recent halves, and
opens any other by its name.  The consumer groups' index is every group's backlog at once.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import Query, Request, Response

from broker_service.api import permissions as rules
from broker_service.api.params import GroupName, GroupQuery
from broker_service.api.permissions import PUB, SUB, needs, read_guard
from broker_service.console import lags
from broker_service.console.routes.common import back_to, router
from broker_service.console.web import checked_form, console_of, form_list, render, who
from broker_service.domain.audit.model import AuditResult
from broker_service.domain.clients.service import ClientService
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.errors import DomainError, InvalidRequest
from broker_service.domain.transactions.service import TransactionService
from broker_service.logs import redact


def _consumers(request: Request) -> ConsumerService:
    service: ConsumerService = request.app.state.consumers
    return service


REST_CLIENT = "REST"  # no gRPC profile: the client spoke halfmq's REST API (its framework)


async def _agents(request: Request, client_ids: list[str]) -> dict[str, str]:
    """What each gRPC client among ``client_ids`` says it is (``gRPC PYTHON 5.1.2``)."""
    clients: ClientService = request.app.state.clients
    profiles = await clients.profiles(client_ids)
    return {client_id: f"gRPC {p.agent}" for client_id, p in profiles.items()}


@router.get("/producer-groups")
@needs(rules.admin)
async def producer_groups(request: Request, group: GroupQuery = None) -> Response:
    if group:
        return back_to(f"/console/producer-groups/{group}")
    service: TransactionService = request.app.state.transactions
    recent = await service.list_transactions(None, None, None, 1000)
    known = sorted({r.producer_group for r in recent})
    return render(request, "producer_groups.html", groups=known)


@router.get("/producer-groups/{group}")
@needs(rules.path_group(PUB))
async def producer_group(group: GroupName, request: Request) -> Response:
    service: TransactionService = request.app.state.transactions
    instances = await service.producer_group(group)
    agents = await _agents(request, [i.client_id for i in instances])
    policy = service.checkback.policy
    now = service.clock()
    rows = [
        {
            "client_id": i.client_id,
            "client": agents.get(i.client_id, REST_CLIENT),
            "mode": "callback" if i.push else "pull",
            "callback_url": redact(i.callback_url) if i.callback_url else None,
            "last_heartbeat_at": i.last_heartbeat_at,
            "live": now - i.last_heartbeat_at < policy.producer_expiry_ms,
            "reachable": i.reachable(now),
            "last_error": redact(i.last_error) if i.last_error else None,
            "topics": ", ".join(i.topics),
        }
        for i in instances
    ]
    return render(request, "producer_group.html", group=group, instances=rows)


@router.get("/consumer-groups")
@needs(rules.admin)
async def consumer_groups(request: Request, group: GroupQuery = None) -> Response:
    if group:
        return back_to(f"/console/consumer-groups/{group}")
    found = await lags.backlogs(_consumers(request))
    return render(request, "consumer_groups.html", groups=found or [], readable=found is not None)


@router.get("/consumer-groups/{group}")
@needs(rules.path_group(SUB))
async def consumer_group(group: GroupName, request: Request) -> Response:
    consumers = _consumers(request)
    try:
        view = await consumers.view(group)
    except lags.UNREADABLE as error:  # the store could not answer: say so, guess nothing
        return render(
            request, "consumer_group.html", group=group, view=None,
            audit=[], unreadable=redact(error.message),
        )  # fmt: skip
    audit = await console_of(request).auditor.entries(f"consumer-group:{group}", limit=20)
    agents = await _agents(request, [m.client_id for m in view.members])
    return render(
        request,
        "consumer_group.html",
        group=group,
        view=view,
        agents=agents,
        rest_client=REST_CLIENT,
        expired=sum(q.expired for q in view.queues),
        audit=audit,
        unreadable=None,
    )


def _timestamp(text: str) -> int:
    """An HTML datetime-local value (UTC, as the page says) or RFC 3339, in ms."""
    try:
        at = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(
            f"timestamp {text!r} is not a date and time", code="INVALID_TIMESTAMP"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return int(at.timestamp() * 1000)


@router.post("/consumer-groups/{group}/reset-offset")
@needs(rules.admin)
async def reset_offset(group: GroupName, request: Request) -> Response:
    form = await checked_form(request)
    subject = f"consumer-group:{group}"
    topic = form.get("topic", "")
    detail: dict[str, object] = {"topic": topic, "timestamp": form.get("timestamp", "")}
    auditor = console_of(request).auditor
    try:
        reset = await _consumers(request).reset_offset(
            group, topic, _timestamp(form.get("timestamp", ""))
        )
    except DomainError as error:
        detail |= {"code": error.code, "message": error.message}
        await auditor.record(who(request), "reset_offset", subject, AuditResult.FAILED, detail)
        return back_to(f"/console/consumer-groups/{group}")
    detail["offsets"] = {str(q): o for q, o in reset.offsets.items()}
    await auditor.record(who(request), "reset_offset", subject, AuditResult.OK, detail)
    return back_to(f"/console/consumer-groups/{group}")


@router.get("/consumer-groups/{group}/dlq")
@needs(rules.path_group(SUB))
async def dead_letters(
    group: GroupName, request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> Response:
    dead = await _consumers(request).dead_messages(group, limit, read_guard(request))
    audit = await console_of(request).auditor.entries(f"consumer-group:{group}", limit=20)
    return render(request, "dlq.html", group=group, dead=dead, audit=audit)


@router.post("/consumer-groups/{group}/dlq/resend")
@needs(rules.admin)
async def resend(group: GroupName, request: Request) -> Response:
    await checked_form(request)
    chosen = form_list(await request.form(), "msg_id")[:1000]
    subject = f"consumer-group:{group}"
    auditor = console_of(request).auditor
    for msg_id in chosen:
        try:
            await _consumers(request).resend(group, msg_id)
        except DomainError as error:
            detail = {"msg_id": msg_id, "code": error.code, "message": error.message}
            await auditor.record(
                who(request), "resend_dead_letter", subject, AuditResult.FAILED, detail
            )
            continue
        await auditor.record(
            who(request), "resend_dead_letter", subject, AuditResult.OK, {"msg_id": msg_id}
        )
    return back_to(f"/console/consumer-groups/{group}/dlq")
