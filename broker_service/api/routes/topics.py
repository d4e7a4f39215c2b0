"""``/v1/topics``: topic administration and sending."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, status

from broker_service.api import convert
from broker_service.api import permissions as rules
from broker_service.api.deps import MessagesDep, messages_of, metrics_of, nonce_of
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.params import TopicName, UserTopicName
from broker_service.api.permissions import PUB, SUB, needs
from broker_service.api.schemas.bodies import body_schema, json_bytes, validated
from broker_service.api.schemas.messages import (
    BatchIn,
    BatchResultOut,
    MessageIn,
    SendResultOut,
    TopicIn,
    TopicListOut,
    TopicOut,
    plain_batch,
)

router = APIRouter(prefix="/v1/topics", tags=["topics"], responses=ERROR_RESPONSES)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TopicOut,
    responses={200: {"model": TopicOut, "description": "The topic exists with the same config"}},
)
@needs(rules.admin)
async def create_topic(
    body: TopicIn, service: MessagesDep, request: Request, response: Response
) -> TopicOut:
    """Create a topic; the same config again is 200, another config 409."""
    nonce = nonce_of(request)
    result = await service.create_topic(body.name, body.queues, body.order, nonce=nonce)
    if not result.created:
        response.status_code = status.HTTP_200_OK
    return convert.topic_out(result.view)


@router.get("", response_model=TopicListOut)
@needs(rules.admin)
async def list_topics(service: MessagesDep) -> TopicListOut:
    return TopicListOut(topics=[convert.topic_out(v) for v in await service.list_topics()])


@router.get("/{topic}", response_model=TopicOut)
@needs(rules.path_topic(SUB))
async def get_topic(topic: TopicName, service: MessagesDep) -> TopicOut:
    return convert.topic_out(await service.get_topic(topic))


@router.delete("/{topic}", status_code=status.HTTP_204_NO_CONTENT)
@needs(rules.admin)
async def delete_topic(topic: UserTopicName, service: MessagesDep, request: Request) -> Response:
    await service.delete_topic(topic, nonce=nonce_of(request))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{topic}/messages", status_code=status.HTTP_201_CREATED, response_model=SendResultOut)
@needs(rules.path_topic(PUB))
async def send_message(topic: UserTopicName, body: MessageIn, request: Request) -> Response:
    """Store one message; a retransmit with the same ``msg_id`` and content is answered again."""
    sent = await send_one(request, topic, body)
    return convert.json_response(sent, status.HTTP_201_CREATED)


async def send_one(request: Request, topic: str, body: MessageIn) -> dict[str, Any]:
    """One message stored, answered as ``SendResultOut``: this route's work, and each item's of
    ``POST /v1/messages:batch``."""
    (receipt,) = await messages_of(request).send(topic, [body.to_draft()], nonce=nonce_of(request))
    metrics_of(request).messages_sent.labels(duplicate=str(receipt.duplicate).lower()).inc()
    return convert.receipt_dict(receipt)


@router.post(
    "/{topic}/messages:batch",
    status_code=status.HTTP_201_CREATED,
    response_model=BatchResultOut,
    openapi_extra=body_schema(BatchIn),
)
@needs(rules.path_topic(PUB))
async def send_batch(topic: UserTopicName, request: Request) -> Response:
    """Store every message of the batch, in order, or none of them."""
    service, metrics = messages_of(request), metrics_of(request)
    # The broker's hottest request: its body is validated from the bytes in one pass, and a
    # batch of bodies alone (the common one) goes as columns, with no record per message.
    raw = await json_bytes(request)
    plain = plain_batch(raw)
    if plain is not None:
        sent = await service.send_plain(topic, plain, nonce=nonce_of(request))
        metrics.messages_sent.labels(duplicate="false").inc(len(sent.msg_ids))
        results = convert.plain_receipt_dicts(sent)
    else:
        body = validated(raw, BatchIn)
        drafts = [m.to_draft() for m in body.messages]
        receipts = await service.send(topic, drafts, nonce=nonce_of(request))
        duplicates = sum(r.duplicate for r in receipts)
        metrics.messages_sent.labels(duplicate="true").inc(duplicates)
        metrics.messages_sent.labels(duplicate="false").inc(len(receipts) - duplicates)
        results = [convert.receipt_dict(r) for r in receipts]
    return convert.json_response({"results": results}, status.HTTP_201_CREATED)
