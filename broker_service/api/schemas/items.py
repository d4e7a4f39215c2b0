"""Requests answered item by item (docs/api.md, "Requests of many items"): halves, decisions and
plain sends from many callers in one request, each item the body its single route takes, each
answered with its status and what that route would answer: ``{"status": 201, "result": {...}}``,
or ``{"status": 404, "error": {"code", "message", "detail"}}`` (the route's error envelope).

The request's shape is checked whole, as every body of the API is (a malformed item is 422 for the
request: a client's bug, not a message's fate); what the domain, the store or the ACL say of an
item is that item's answer alone.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from broker_service.api.schemas.common import (
    TEXT_PATTERN,
    USER_TOPIC_SCHEMA,
    ErrorBody,
    Storable,
    Strict,
)
from broker_service.api.schemas.messages import BATCH_MAX, MessageIn, SendResultOut
from broker_service.api.schemas.transactions import (
    DecisionIn,
    ResolutionOut,
    TransactionIn,
)
from halfmq_wire.records import HalfReceipt

ItemStatus = Annotated[int, Field(ge=200, le=599, description="The item's own HTTP status")]


class ItemErrorOut(BaseModel):
    """An item the broker refused: the status and error envelope it would get alone."""

    status: ItemStatus
    error: ErrorBody


# -- halves --------------------------------------------------------------------------------------


class HalvesIn(Strict):
    halves: list[TransactionIn] = Field(
        min_length=1, max_length=BATCH_MAX, description="Each a POST /v1/transactions body"
    )


class HalfItemOut(BaseModel):
    status: ItemStatus
    result: HalfReceipt


class HalvesOut(BaseModel):
    results: list[HalfItemOut | ItemErrorOut] = Field(description="In the order of the halves")


# -- decisions -----------------------------------------------------------------------------------


class DecisionItemIn(DecisionIn):
    """A commit or rollback body, with the transaction and the decision its path would name."""

    transaction_id: Annotated[
        Storable, Field(min_length=1, max_length=255, json_schema_extra={"pattern": TEXT_PATTERN})
    ]
    decision: Literal["COMMIT", "ROLLBACK"]


class DecisionsIn(Strict):
    decisions: list[DecisionItemIn] = Field(
        min_length=1,
        max_length=BATCH_MAX,
        description="Each a POST /v1/transactions/{transaction_id}/commit or /rollback",
    )


class ResolutionItemOut(BaseModel):
    status: ItemStatus
    result: ResolutionOut


class DecisionsOut(BaseModel):
    results: list[ResolutionItemOut | ItemErrorOut] = Field(
        description="In the order of the decisions"
    )


# -- plain sends ---------------------------------------------------------------------------------


class SendItemIn(MessageIn):
    topic: str = Field(json_schema_extra=USER_TOPIC_SCHEMA)


class SendsIn(Strict):
    messages: list[SendItemIn] = Field(
        min_length=1,
        max_length=BATCH_MAX,
        description="Each a POST /v1/topics/{topic}/messages body with its topic",
    )


class SendItemOut(BaseModel):
    status: ItemStatus
    result: SendResultOut


class SendsOut(BaseModel):
    results: list[SendItemOut | ItemErrorOut] = Field(description="In the order of the messages")
