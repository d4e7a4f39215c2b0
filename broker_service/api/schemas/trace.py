"""The message trace's own parts of the REST contract (docs/api.md): the clients' trace reports
(``POST /v1/trace``) and a transaction's check audit (``GET /v1/transactions/{id}/checks``).
A message's timeline itself is ``TraceOut`` (:mod:`.consumers`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from broker_service.api.schemas.common import ErrorBody, Strict, Text, TimeIn, json_number
from broker_service.api.schemas.transactions import TransactionStateName
from broker_service.domain.consumers.trace import ClientTraceRecord

# -- the clients' reports -------------------------------------------------------------------------


class ClientTraceEventIn(Strict):
    msg_id: Annotated[Text, Field(min_length=1, max_length=128)]
    type: Literal["PUB", "SUB"] = Field(description="PUB: sending it; SUB: consuming it")
    topic: Annotated[Text, Field(min_length=1, max_length=255)]
    group: Annotated[Text, Field(min_length=1, max_length=255)] = Field(
        description="The producer group (PUB) or the consumer group (SUB)"
    )
    client_id: Annotated[Text, Field(min_length=1, max_length=255)]
    at: TimeIn
    cost_ms: float = Field(ge=0, le=86_400_000, allow_inf_nan=False)
    status: Literal["OK", "FAILED", "RETRY"]

    _cost = field_validator("cost_ms", mode="before")(json_number)

    def to_record(self) -> ClientTraceRecord:
        """The domain's record: the same fields, as validated."""
        return ClientTraceRecord(**dict(self))


class ClientTraceIn(Strict):
    events: list[ClientTraceEventIn] = Field(min_length=1, max_length=1000)


class ClientTraceRefusalOut(BaseModel):
    index: int = Field(description="The refused event's place in ``events``, from 0")
    error: ErrorBody


class ClientTraceOut(BaseModel):
    recorded: int = Field(description="Events kept (0 while the broker's trace setting is off)")
    refused: list[ClientTraceRefusalOut]


# -- the check audit ------------------------------------------------------------------------------


class CheckEntryOut(BaseModel):
    at: str
    mode: Literal["push", "pull"] | None = Field(
        None, description="None when the round could hand the check to no instance"
    )
    instance: str = Field(description="The instance's client_id (the broker's id when none)")
    check_times: int | None = None
    answer: Literal["COMMIT", "ROLLBACK", "UNKNOWN"] | None = None
    failure: (
        Literal["timeout", "refused", "error", "no_live_instance", "no_reachable_instance"] | None
    ) = None
    latency_ms: int | None = None
    status: int | None = Field(None, description="The HTTP status of an error answer")
    error: str | None = None


class CheckAuditOut(BaseModel):
    transaction_id: str
    state: TransactionStateName
    producer_group: str
    msg_id: str
    check_times: int
    next_check_at: str | None = None
    due: Literal[
        "DUE", "WAITING", "IMMUNE", "CLAIMED", "NO_LIVE_INSTANCE", "DISCARDED", "RESOLVED"
    ] = Field(description="Whether the next round checks it, or why not")
    why: str
    until: str | None = Field(None, description="IMMUNE, CLAIMED or WAITING until")
    claimed_by: str | None = Field(None, description="CLAIMED: the broker holding the claim")
    checks: list[CheckEntryOut] = Field(description="Oldest first")
