"""Messages: search by id, key, topic and time; a message's page with its copies, its
transaction and its trace as a timeline."""

from __future__ import annotations

import datetime as dt
from typing import Annotated
from urllib.parse import quote

from fastapi import Query, Request, Response

from broker_service.api import permissions as rules
from broker_service.api.params import IdPath, TopicQuery
from broker_service.api.permissions import needs, read_guard
from broker_service.console.routes.common import back_to, router
from broker_service.console.routes.transactions import checks_recorded
from broker_service.console.web import render
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.errors import InvalidRequest
from broker_service.domain.messages.service import MessageService
from broker_service.domain.ports import MessageQuery

BODY_PREVIEW = 2048  # characters of a body a page shows


def _ms(text: str | None, name: str) -> int | None:
    """An HTML datetime-local value (UTC) or RFC 3339; empty is none."""
    if not text:
        return None
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(
            f"{name} {text!r} is not a date and time", code="INVALID_TIME"
        ) from None
    return int((at if at.tzinfo else at.replace(tzinfo=dt.UTC)).timestamp() * 1000)


@router.get("/messages")
@needs(rules.find_messages)
async def messages(
    request: Request,
    msg_id: Annotated[str | None, Query(max_length=128)] = None,
    topic: TopicQuery = None,
    key: Annotated[str | None, Query(max_length=128)] = None,
    begin: Annotated[str | None, Query(max_length=40)] = None,
    end: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 32,
) -> Response:
    if msg_id:
        return back_to(f"/console/messages/{quote(msg_id.strip(), safe='')}")
    found = None
    if topic or key or begin or end:
        service: MessageService = request.app.state.messages
        query = MessageQuery(
            topic or None, key or None, _ms(begin, "begin"), _ms(end, "end"), limit
        )
        found = await service.query_messages(query, read_guard(request))
    form = {"topic": topic or "", "key": key or "", "begin": begin or "", "end": end or ""}
    return render(request, "messages.html", found=found, form=form)


def _body(raw: bytes, encoding: str) -> str:
    if encoding == "base64" or not raw:
        return f"({len(raw)} bytes, binary)" if raw else "(empty)"
    text = raw.decode("utf-8", errors="replace")
    return text if len(text) <= BODY_PREVIEW else text[:BODY_PREVIEW] + " ..."


@router.get("/messages/{msg_id}")
@needs(rules.admin)
async def message(msg_id: IdPath, request: Request) -> Response:
    service: MessageService = request.app.state.messages
    consumers: ConsumerService = request.app.state.consumers
    life = await service.message_life(msg_id)
    trace = await consumers.trace(msg_id)
    return render(
        request,
        "message.html",
        life=life,
        trace=trace,
        checks_total=await checks_recorded(consumers.store, msg_id),
        body=_body(life.message.body, life.message.encoding),
    )
