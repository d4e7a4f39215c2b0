"""Requests answered item by item: many halves, many decisions, many plain sends in one request,
as a producer with many transactions in flight sends them (``framework.batching``).

Each item is the body of its single route and goes through that route's own code
(:func:`~broker_service.api.routes.transactions.store_half`,
:func:`~broker_service.api.routes.transactions.resolve`,
:func:`~broker_service.api.routes.topics.send_one`), after the ACL's needs it would have alone
(:class:`~broker_service.api.permissions.ItemGuard`); :func:`~broker_service.api.items.answer_each`
awaits them together and answers each on its own.  ``POST /v1/topics/{topic}/messages:batch`` stays
what it is: one topic, stored whole or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from broker_service.api import convert
from broker_service.api import permissions as rules
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.items import Item, answer_each
from broker_service.api.permissions import ItemGuard, item_guard, needs
from broker_service.api.routes.topics import send_one
from broker_service.api.routes.transactions import resolve, store_half
from broker_service.api.schemas.bodies import body_schema, json_bytes, validated
from broker_service.api.schemas.items import (
    DecisionItemIn,
    DecisionsIn,
    DecisionsOut,
    HalvesIn,
    HalvesOut,
    SendItemIn,
    SendsIn,
    SendsOut,
)
from broker_service.api.schemas.transactions import TransactionIn
from broker_service.domain.transactions.model import Decision

router = APIRouter(tags=["transactions"], responses=ERROR_RESPONSES)
sends_router = APIRouter(tags=["topics"], responses=ERROR_RESPONSES)

Body = TypeVar("Body", bound=BaseModel)
One = TypeVar("One")


async def _answered(
    request: Request,
    body_type: type[Body],
    listed: Callable[[Body], Sequence[One]],
    item: Callable[[Request, One, ItemGuard | None], Item],
) -> Response:
    """The request's body (a ``body_type``), each of the ones it lists made an ``item`` under
    the request's guard, answered each on its own, in order."""
    body = validated(await json_bytes(request), body_type)
    guard = item_guard(request)
    results = await answer_each(request, [item(request, one, guard) for one in listed(body)])
    return convert.json_response({"results": results})


@router.post(
    "/v1/transactions:batch", response_model=HalvesOut, openapi_extra=body_schema(HalvesIn)
)
@needs(rules.each_item)
async def send_halves(request: Request) -> Response:
    """Store many halves, each as ``POST /v1/transactions`` would, each answered on its own
    (``{"status": 201, "result": half}`` or ``{"status", "error"}``), in order."""
    return await _answered(request, HalvesIn, lambda body: body.halves, _half)


def _half(request: Request, half: TransactionIn, guard: ItemGuard | None) -> Item:
    async def item() -> dict[str, Any]:
        if guard is not None:
            guard.half(half.topic, half.producer_group)
        return {"status": 201, "result": await store_half(request, half)}

    return item


@router.post(
    "/v1/transactions/decisions:batch",
    response_model=DecisionsOut,
    openapi_extra=body_schema(DecisionsIn),
)
@needs(rules.each_item)
async def decide_many(request: Request) -> Response:
    """Commit or roll back many halves, each as ``POST /v1/transactions/{id}/commit`` or
    ``/rollback`` would -- exactly one decision wins per transaction, a repeat answers the same --
    each answered on its own, in order."""
    return await _answered(request, DecisionsIn, lambda body: body.decisions, _decision)


def _decision(request: Request, decision: DecisionItemIn, guard: ItemGuard | None) -> Item:
    async def item() -> dict[str, Any]:
        may_end = None if guard is None else guard.decision(decision.producer_group)
        what = Decision(decision.decision)
        resolved = await resolve(request, decision.transaction_id, what, decision, may_end)
        return {"status": 200, "result": resolved}

    return item


@sends_router.post(
    "/v1/messages:batch", response_model=SendsOut, openapi_extra=body_schema(SendsIn)
)
@needs(rules.each_item)
async def send_many(request: Request) -> Response:
    """Store many messages, each to its own topic as ``POST /v1/topics/{topic}/messages`` would,
    each answered on its own, in order (not all or nothing: that is the topic's
    ``messages:batch``)."""
    return await _answered(request, SendsIn, lambda body: body.messages, _send)


def _send(request: Request, message: SendItemIn, guard: ItemGuard | None) -> Item:
    async def item() -> dict[str, Any]:
        if guard is not None:
            guard.send(message.topic)
        return {"status": 201, "result": await send_one(request, message.topic, message)}

    return item
