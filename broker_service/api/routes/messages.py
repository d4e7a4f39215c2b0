"""``/v1/messages``: a message by id (and where it is in its life), or by key and time range."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from broker_service.api import convert
from broker_service.api import permissions as rules
from broker_service.api.deps import MessagesDep
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.params import IdPath, KeyQuery, TopicQuery
from broker_service.api.permissions import needs, read_guard
from broker_service.api.schemas.common import TimeIn
from broker_service.api.schemas.messages import MessageLifeOut, MessageListOut
from broker_service.domain.ports import MessageQuery

router = APIRouter(prefix="/v1/messages", tags=["messages"], responses=ERROR_RESPONSES)


@router.get("/{msg_id}", response_model=MessageLifeOut)
@needs(rules.admin)
async def get_message(msg_id: IdPath, service: MessagesDep) -> MessageLifeOut:
    return convert.life_out(await service.message_life(msg_id))


@router.get("", response_model=MessageListOut)
@needs(rules.find_messages)
async def find_messages(
    request: Request,
    service: MessagesDep,
    topic: TopicQuery = None,
    key: KeyQuery = None,
    begin: Annotated[TimeIn | None, Query()] = None,
    end: Annotated[TimeIn | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 32,
) -> MessageListOut:
    """Messages by key (RocketMQ's index query) and/or topic, stored between begin and end;
    with the ACL on, only those of topics the caller may read (a system topic's copies by their
    real topic)."""
    query = MessageQuery(topic, key, begin, end, limit)
    found = await service.query_messages(query, read_guard(request))
    return MessageListOut(messages=[convert.message_out(m) for m in found])
