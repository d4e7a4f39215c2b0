"""``/v1/consumer-groups``: groups, subscriptions, receive / ack / nack, offsets and dead letters."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status

from broker_service.api import convert
from broker_service.api import permissions as rules
from broker_service.api.deps import ConsumersDep, MetricsDep, nonce_of
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.params import GroupName, IdPath
from broker_service.api.permissions import SUB, needs, read_guard
from broker_service.api.schemas.common import rfc3339
from broker_service.api.schemas.consumers import (
    AckIn,
    AckReceiveIn,
    AckReceiveOut,
    ChangeInvisibleIn,
    ChangeInvisibleOut,
    DeadListOut,
    DeadOut,
    GroupIn,
    GroupOut,
    GroupViewOut,
    MemberOut,
    NackIn,
    NackOut,
    QueueProgressOut,
    ReceiveIn,
    ReceiveOut,
    ResetIn,
    ResetOut,
    ResetQueueOut,
    SubscriptionIn,
    SubscriptionOut,
    TraceEventOut,
    TraceOut,
)
from broker_service.domain.consumers.model import (
    ConsumeFrom,
    ConsumerGroup,
    DeadMessage,
    Delivered,
    MessageModel,
    Receiving,
    Subscription,
    dlq_topic,
    retry_topic,
)
from halfmq_wire.records import AckResult

router = APIRouter(
    prefix="/v1/consumer-groups", tags=["consumer groups"], responses=ERROR_RESPONSES
)


def _group_fields(group: ConsumerGroup) -> dict[str, Any]:
    return {
        "name": group.name,
        "message_model": group.message_model.value,
        "consume_from": group.consume_from.value,
        "consume_timestamp": rfc3339(group.consume_timestamp),
        "max_reconsume_times": group.max_reconsume_times,
        "orderly": group.orderly,
        "created_at": rfc3339(group.created_at) or "",
        "retry_topic": retry_topic(group.name),
        "dlq_topic": dlq_topic(group.name),
    }


def _subscription_out(s: Subscription) -> SubscriptionOut:
    return SubscriptionOut(
        consumer_group=s.consumer_group,
        topic=s.topic,
        expression=s.expression,
        created_at=rfc3339(s.created_at) or "",
    )


def _delivered_dict(d: Delivered) -> dict[str, object]:
    """``DeliveredOut`` as a plain dict (receive is a hot route: see ``convert.json_response``)."""
    fields = convert.message_fields(d.message)
    fields["topic"] = d.topic
    fields["reconsume_times"] = d.reconsume_times
    fields["receipt_handle"] = d.receipt_handle
    fields["invisible_until"] = rfc3339(d.invisible_until)
    return fields


def _receiving(group: str, body: ReceiveIn) -> Receiving:
    """The receive a body asks for (``.../receive``'s, or ``.../ack-and-receive``'s after its ack)."""
    return Receiving(
        group,
        body.client_id,
        body.topic,
        body.max_messages,
        body.invisible_seconds,
        body.wait_seconds,
        body.max_per_queue,
    )


def _dead_out(dead: DeadMessage) -> DeadOut:
    fields = convert.message_fields(dead.message)
    fields["original_topic"] = dead.original_topic
    fields["resent_at"] = rfc3339(dead.resent_at)
    return DeadOut.model_validate(fields)


@router.post(
    "",
    response_model=GroupOut,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": GroupOut, "description": "The group exists with the same config"}},
)
@needs(rules.create_consumer_group)
async def create_group(
    body: GroupIn, consumers: ConsumersDep, request: Request, response: Response
) -> GroupOut:
    """Create a group: 201; the same config again: 200; another config: 409."""
    created = await consumers.create_group(
        ConsumerGroup(
            name=body.name,
            message_model=MessageModel(body.message_model),
            consume_from=ConsumeFrom(body.consume_from),
            consume_timestamp=body.consume_timestamp,
            max_reconsume_times=body.max_reconsume_times,
            orderly=body.orderly,
        ),
        nonce=nonce_of(request),
    )
    if not created.created:
        response.status_code = status.HTTP_200_OK
    return GroupOut.model_validate(_group_fields(created.group))


@router.post(
    "/{group}/subscriptions",
    response_model=SubscriptionOut,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": SubscriptionOut, "description": "The same subscription again"}},
)
@needs(rules.group_and_body_topic(SUB))
async def subscribe(
    group: GroupName,
    body: SubscriptionIn,
    consumers: ConsumersDep,
    request: Request,
    response: Response,
) -> SubscriptionOut:
    """Subscribe the group to a topic with a tag expression (201; unchanged or updated: 200).
    With ``auto_create_groups`` an unknown group is created with the defaults."""
    nonce = nonce_of(request)
    subscribed = await consumers.subscribe(group, body.topic, body.expression, nonce=nonce)
    if not subscribed.created:
        response.status_code = status.HTTP_200_OK
    return _subscription_out(subscribed.subscription)


@router.post("/{group}/receive", response_model=ReceiveOut)
@needs(rules.group_and_body_topic(SUB))
async def receive(
    group: GroupName,
    body: ReceiveIn,
    consumers: ConsumersDep,
    metrics: MetricsDep,
    request: Request,
) -> Response:
    """Messages for this member, each with a receipt handle, invisible to the rest of the group
    for ``invisible_seconds``.  With ``wait_seconds`` the answer comes as soon as one is
    deliverable (long poll), or empty when the wait is over."""
    delivered = await consumers.receive(_receiving(group, body), nonce=nonce_of(request))
    metrics.count_receive(len(delivered))
    return convert.json_response({"messages": [_delivered_dict(d) for d in delivered]})


@router.post("/{group}/ack", response_model=AckResult)
@needs(rules.path_group(SUB))
async def ack(
    group: GroupName, body: AckIn, consumers: ConsumersDep, metrics: MetricsDep, request: Request
) -> Response:
    """Consumed.  A stale handle (its invisibility ran out) acks nothing; the message comes again."""
    result = await consumers.ack(group, body.receipt_handles, nonce=nonce_of(request))
    metrics.count_ack(result.acked, len(result.stale))
    return convert.json_response(AckResult(result.acked, tuple(result.stale)).to_json())


@router.post("/{group}/ack-and-receive", response_model=AckReceiveOut)
@needs(rules.group_and_body_topic(SUB))
async def ack_and_receive(
    group: GroupName,
    body: AckReceiveIn,
    consumers: ConsumersDep,
    metrics: MetricsDep,
    request: Request,
) -> Response:
    """An ack and this member's next receive in one request: ``receipt_handles`` are acked as by
    ``.../ack`` (durable once answered), then messages are received as by ``.../receive``; the
    ack and the first look for messages commit together, and an error applies neither."""
    result, delivered = await consumers.ack_and_receive(
        body.receipt_handles, _receiving(group, body), nonce=nonce_of(request)
    )
    metrics.count_ack(result.acked, len(result.stale))
    metrics.count_receive(len(delivered))
    return convert.json_response(
        {
            "acked": result.acked,
            "stale": result.stale,
            "messages": [_delivered_dict(d) for d in delivered],
        }
    )


@router.post("/{group}/nack", response_model=NackOut)
@needs(rules.path_group(SUB))
async def nack(
    group: GroupName, body: NackIn, consumers: ConsumersDep, metrics: MetricsDep, request: Request
) -> NackOut:
    """RECONSUME_LATER: the message comes back after the retry delay; past max_reconsume_times it
    goes to the group's DLQ.  404 unknown handle, 409 stale handle."""
    nonce = nonce_of(request)
    result = await consumers.nack(group, body.receipt_handle, body.delay_level, nonce=nonce)
    metrics.consumer_messages.labels(outcome=result.outcome.lower()).inc()
    return NackOut(
        receipt_handle=result.receipt_handle,
        msg_id=result.msg_id,
        reconsume_times=result.reconsume_times,
        outcome=result.outcome,
        deliver_at=rfc3339(result.deliver_at),
    )


@router.post("/{group}/change-invisible", response_model=ChangeInvisibleOut)
@needs(rules.path_group(SUB))
async def change_invisible(
    group: GroupName, body: ChangeInvisibleIn, consumers: ConsumersDep, request: Request
) -> ChangeInvisibleOut:
    """Keep a message invisible longer (from now): answers a new handle; the old one is stale."""
    delivery = await consumers.change_invisible(
        group, body.receipt_handle, body.invisible_seconds, nonce=nonce_of(request)
    )
    return ChangeInvisibleOut(
        receipt_handle=delivery.receipt_handle,
        invisible_until=rfc3339(delivery.invisible_until) or "",
    )


@router.get("/{group}", response_model=GroupViewOut)
@needs(rules.path_group(SUB))
async def show_group(group: GroupName, consumers: ConsumersDep) -> GroupViewOut:
    """Subscriptions, members, and per topic and queue: committed and max offset, lag, in flight,
    retrying and dead."""
    view = await consumers.view(group)
    queues = [
        QueueProgressOut(
            topic=q.topic,
            queue_id=q.queue_id,
            client_id=q.client_id or None,
            committed_offset=q.committed_offset,
            max_offset=q.max_offset,
            lag=q.lag,
            in_flight=q.in_flight,
            retrying=q.retrying,
            dead=q.dead,
            expired=q.expired,
        )
        for q in view.queues
    ]
    return GroupViewOut.model_validate(
        {
            **_group_fields(view.group),
            "subscriptions": [_subscription_out(s) for s in view.subscriptions],
            "members": [
                MemberOut(
                    client_id=m.client_id,
                    last_seen_at=rfc3339(m.last_seen_at) or "",
                    live=m.last_seen_at >= view.live_since,
                )
                for m in view.members
            ],
            "queues": queues,
            "lag": view.lag,  # the group's, as the metrics count it (not the rows' sum)
            "in_flight": sum(q.in_flight for q in queues),
            "retrying": view.retrying,
            "dead": view.dead,
        }
    )


@router.post("/{group}/reset-offset", response_model=ResetOut)
@needs(rules.admin)
async def reset_offset(
    group: GroupName, body: ResetIn, consumers: ConsumersDep, request: Request
) -> ResetOut:
    """Operator: consume the topic again from the first message stored at or after ``timestamp``
    (forward or back).  Messages in flight of the topic come again; their handles go stale."""
    nonce = nonce_of(request)
    reset = await consumers.reset_offset(group, body.topic, body.timestamp, nonce=nonce)
    return ResetOut(
        consumer_group=group,
        topic=reset.topic,
        queues=[ResetQueueOut(queue_id=q, offset=o) for q, o in sorted(reset.offsets.items())],
    )


@router.get("/{group}/dlq", response_model=DeadListOut)
@needs(rules.path_group(SUB))
async def list_dead(
    request: Request,
    group: GroupName,
    consumers: ConsumersDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> DeadListOut:
    """The group's dead letters (%DLQ%{group}), oldest first; resent ones have ``resent_at``.
    With the ACL on, only those of topics the caller may read."""
    dead = await consumers.dead_messages(group, limit, read_guard(request))
    return DeadListOut(messages=[_dead_out(d) for d in dead])


@router.post("/{group}/dlq/{msg_id}/resend", response_model=DeadOut)
@needs(rules.admin)
async def resend(
    group: GroupName, msg_id: IdPath, consumers: ConsumersDep, metrics: MetricsDep, request: Request
) -> DeadOut:
    """Send a dead message back to the group (through its retry topic, reconsume count reset).
    404 not in the DLQ; 409 already resent."""
    dead = await consumers.resend(group, msg_id, nonce=nonce_of(request))
    metrics.consumer_messages.labels(outcome="resent").inc()
    return _dead_out(dead)


trace_router = APIRouter(prefix="/v1/messages", tags=["messages"], responses=ERROR_RESPONSES)

_TRACE_EVENTS = set(TraceEventOut.model_fields["event"].annotation.__args__)  # type: ignore[union-attr]


@trace_router.get("/{msg_id}/trace", response_model=TraceOut)
@needs(rules.admin)
async def trace(msg_id: IdPath, consumers: ConsumersDep) -> TraceOut:
    """What happened to a message, oldest first: stored (SENT / HALF_STORED), resolved
    (COMMITTED / ROLLED_BACK, DISCARDED), and for each consumer group DELIVERED, ACKED, NACKED,
    RETRIED, DEAD and RESENT."""
    events = await consumers.trace(msg_id)
    return TraceOut(
        msg_id=msg_id,
        events=[
            TraceEventOut.model_validate(
                {"at": rfc3339(e.at), "event": e.event, "by": e.by, "detail": e.detail}
            )
            for e in events
            if e.event in _TRACE_EVENTS
        ],
    )
