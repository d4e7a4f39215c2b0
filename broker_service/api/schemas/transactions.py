"""The transactions of the REST contract (docs/api.md): a half message, its decision, its state."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StrictBool, field_validator

from broker_service.api.schemas.common import (
    NAME_SCHEMA,
    USER_TOPIC_SCHEMA,
    Name,
    Strict,
    Text,
    json_number,
)
from broker_service.api.schemas.messages import MessageIn

# -- transactions --------------------------------------------------------------------------------

# A transaction's state, as the contract spells it (the domain's ``TransactionState``).
TransactionStateName = Literal["PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED"]


class TransactionIn(MessageIn):
    topic: str = Field(json_schema_extra=USER_TOPIC_SCHEMA)
    producer_group: str = Field(json_schema_extra=NAME_SCHEMA)
    check_immunity_seconds: float | None = Field(None, ge=0, le=86_400 * 7)
    client_id: Annotated[Text, Field(min_length=1, max_length=255)] | None = Field(
        None,
        description="The producer instance that sends the half (the client_id it heartbeats "
        "with): check-back asks it first while it is live",
    )

    _immunity = field_validator("check_immunity_seconds", mode="before")(json_number)


class DecisionIn(Strict):
    producer_group: Name | None = Field(
        None, description="The half's producer group; may be left out by an operator"
    )
    from_check: StrictBool = False
    client_id: Annotated[Text, Field(min_length=1, max_length=255)] | None = Field(
        None,
        description="The producer instance that decides (the client_id it heartbeats with): "
        "the message trace's COMMITTED / ROLLED_BACK event names it",
    )


class ResolutionOut(BaseModel):
    transaction_id: str
    state: Literal["COMMITTED", "ROLLED_BACK"]
    msg_id: str
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None


class TransactionOut(BaseModel):
    transaction_id: str
    state: TransactionStateName
    producer_group: str
    topic: str
    msg_id: str
    check_times: int
    created_at: str
    resolved_at: str | None = None
    resolved_by: Literal["producer", "check", "operator"] | None = None
    resolved_client: str | None = Field(
        None, description="The client_id the deciding commit or rollback named"
    )
    last_checked_at: str | None = Field(None, description="When a check last reached an instance")
    last_check_error: str | None = Field(
        None,
        description="The last check that went wrong: not delivered (not counted), or received "
        "with no answer (counted)",
    )
    last_check_error_at: str | None = None
    undelivered_since: str | None = Field(
        None, description="Since when this half's checks have reached no instance"
    )


class TransactionListOut(BaseModel):
    transactions: list[TransactionOut]
