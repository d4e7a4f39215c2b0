"""The consumer-group bodies of the REST contract (docs/api.md, "Consumer groups")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from broker_service.api.schemas.common import (
    DEFAULT_LEVEL_COUNT,
    EXPRESSION_PATTERN,
    NAME_SCHEMA,
    USER_TOPIC_SCHEMA,
    Storable,
    Strict,
    Text,
    TimeIn,
    json_number,
)
from broker_service.api.schemas.messages import MessageOut

ClientId = Annotated[Text, Field(min_length=1, max_length=255)]
Handle = Annotated[Text, Field(min_length=1, max_length=128)]


class GroupIn(Strict):
    # consume_from TIMESTAMP needs its timestamp (else 422 INVALID_CONSUME_FROM).
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "if": {
                "properties": {"consume_from": {"const": "TIMESTAMP"}},
                "required": ["consume_from"],
            },
            "then": {
                "required": ["consume_timestamp"],
                "properties": {"consume_timestamp": {"not": {"type": "null"}}},
            },
        },
    )
    name: str = Field(json_schema_extra=NAME_SCHEMA)
    message_model: Literal["CLUSTERING", "BROADCASTING"] = "CLUSTERING"
    consume_from: Literal["FIRST_OFFSET", "LAST_OFFSET", "TIMESTAMP"] = Field(
        "LAST_OFFSET", description="Where the group starts in a topic it subscribes to"
    )
    consume_timestamp: TimeIn | None = Field(None, description="For consume_from TIMESTAMP")
    max_reconsume_times: int | None = Field(
        None, ge=0, le=10_000, description="Default: the broker's max_reconsume_times (16)"
    )
    orderly: StrictBool = False

    _numbers = field_validator("max_reconsume_times", mode="before")(json_number)


class GroupOut(BaseModel):
    name: str
    message_model: str
    consume_from: str
    consume_timestamp: str | None = None
    max_reconsume_times: int | None = None
    orderly: bool
    created_at: str
    retry_topic: str
    dlq_topic: str


class SubscriptionIn(Strict):
    topic: str = Field(json_schema_extra=USER_TOPIC_SCHEMA)
    expression: Annotated[
        Storable,
        Field(min_length=1, max_length=1024, json_schema_extra={"pattern": EXPRESSION_PATTERN}),
    ] = Field("*", description="'*' or tags joined by '||' (TagA || TagB)")


class SubscriptionOut(BaseModel):
    consumer_group: str
    topic: str
    expression: str
    created_at: str


class ReceiveIn(Strict):
    client_id: ClientId
    topic: str | None = Field(
        None,
        json_schema_extra=USER_TOPIC_SCHEMA,
        description="One subscribed topic (and its retries); null: every subscription",
    )
    max_messages: int = Field(32, ge=1, le=1000)
    invisible_seconds: float = Field(30, gt=0, le=43_200)
    wait_seconds: float = Field(
        0, ge=0, le=300, description="Long poll: answer as soon as a message is deliverable"
    )
    max_per_queue: int = Field(
        1,
        ge=1,
        le=1000,
        description="Orderly groups: the most consecutive messages of one queue one receive "
        "hands out (a batch consumer's batch size); other groups take up to max_messages "
        "from a queue",
    )

    _numbers = field_validator(
        "max_messages", "invisible_seconds", "wait_seconds", "max_per_queue", mode="before"
    )(json_number)


class DeliveredOut(MessageOut):
    receipt_handle: str
    invisible_until: str


class ReceiveOut(BaseModel):
    messages: list[DeliveredOut]


class AckIn(Strict):
    receipt_handles: list[Handle] = Field(min_length=1, max_length=1000)


class AckReceiveIn(ReceiveIn):
    """An ack and the member's next receive in one request (``.../ack-and-receive``)."""

    receipt_handles: list[Handle] = Field(
        min_length=1, max_length=1000, description="Acked first, as POST .../ack acks them"
    )


class AckReceiveOut(ReceiveOut):
    acked: int
    stale: list[str]


class NackIn(Strict):
    receipt_handle: Handle
    delay_level: (
        Annotated[int, Field(ge=0, le=1000, json_schema_extra={"maximum": DEFAULT_LEVEL_COUNT})]
        | None
    ) = Field(
        None,
        description="1-18 (as many as message_delay_level has; others are 422 "
        "INVALID_DELAY_LEVEL); null or 0: the retry schedule (level 3 + reconsume_times)",
    )

    _numbers = field_validator("delay_level", mode="before")(json_number)


class NackOut(BaseModel):
    receipt_handle: str
    msg_id: str
    reconsume_times: int
    outcome: Literal["RETRY", "RETRY_IN_PLACE", "DLQ"]
    deliver_at: str | None = None


class ChangeInvisibleIn(Strict):
    receipt_handle: Handle
    invisible_seconds: float = Field(gt=0, le=43_200)

    _numbers = field_validator("invisible_seconds", mode="before")(json_number)


class ChangeInvisibleOut(BaseModel):
    receipt_handle: str
    invisible_until: str


class QueueProgressOut(BaseModel):
    topic: str
    queue_id: int
    client_id: str | None = Field(None, description="The member (broadcasting groups)")
    committed_offset: int | None
    max_offset: int
    lag: int
    in_flight: int
    retrying: int
    dead: int
    expired: int = Field(
        0,
        description="Messages retention purged before the group (member) passed them: past "
        "retention_hard_limit_hours, or a broadcasting member not seen for the retention",
    )


class MemberOut(BaseModel):
    client_id: str
    last_seen_at: str
    live: bool


class GroupViewOut(GroupOut):
    subscriptions: list[SubscriptionOut]
    members: list[MemberOut]
    queues: list[QueueProgressOut]
    lag: int
    in_flight: int
    retrying: int
    dead: int


class ResetIn(Strict):
    topic: str = Field(json_schema_extra=USER_TOPIC_SCHEMA)
    timestamp: TimeIn


class ResetQueueOut(BaseModel):
    queue_id: int
    offset: int


class ResetOut(BaseModel):
    consumer_group: str
    topic: str
    queues: list[ResetQueueOut]


class DeadOut(MessageOut):
    original_topic: str | None = None
    resent_at: str | None = None


class DeadListOut(BaseModel):
    messages: list[DeadOut]


class TraceEventOut(BaseModel):
    at: str
    event: Literal[
        "SENT",
        "HALF_STORED",
        "COMMITTED",
        "ROLLED_BACK",
        "CHECKED",
        "DISCARDED",
        "RESUMED",
        "OPERATOR_COMMIT",
        "OPERATOR_ROLLBACK",
        "OPERATOR_CHECK",
        "CLIENT_PUB",
        "CLIENT_SUB",
        "DELIVERED",
        "ACKED",
        "NACKED",
        "RETRIED",
        "DEAD",
        "RESENT",
    ]
    by: str = Field(
        description="Client, producer instance, producer group, consumer member, access key "
        "or broker id (docs/observability.md, Message trace)"
    )
    detail: dict[str, Any] = Field(default_factory=dict)


class TraceOut(BaseModel):
    msg_id: str
    events: list[TraceEventOut]
