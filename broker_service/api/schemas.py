"""The REST contract's bodies (api.md), as pydantic models -- they describe ``/openapi.json``."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from broker_service.domain.errors import InvalidRequest
from broker_service.domain.model import Encoding, MessageDraft


def rfc3339(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(value: Any) -> Any:
    """RFC 3339 strings or epoch milliseconds, to epoch milliseconds."""
    if isinstance(value, bool):
        raise ValueError("a time is an RFC 3339 string or epoch milliseconds")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"{value!r} is not an RFC 3339 time or epoch milliseconds") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    return value


TimeIn = Annotated[
    int,
    BeforeValidator(_parse_time),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}],
            "description": "RFC 3339 time or epoch milliseconds",
        }
    ),
]
Name = Annotated[str, Field(min_length=1, max_length=127, pattern=r"^[A-Za-z0-9_-]{1,127}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    code: str = Field(examples=["TOPIC_NOT_FOUND"])
    message: str
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorEnvelope(BaseModel):
    error: ErrorBody


# -- messages ------------------------------------------------------------------------------------


class MessageIn(Strict):
    body: str = Field(description="The body: text, or base64 when encoding is base64")
    encoding: Literal["utf-8", "base64"] = "utf-8"
    tags: str | None = Field(None, max_length=128)
    keys: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=32
    )
    properties: dict[Annotated[str, Field(min_length=1, max_length=128)], str] = Field(
        default_factory=dict
    )
    sharding_key: str | None = Field(None, min_length=1, max_length=255)
    queue_id: int | None = Field(None, ge=0, le=1_000_000)
    delay_level: int | None = Field(None, ge=0, le=1000)
    deliver_at: TimeIn | None = None
    msg_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")

    def to_draft(self) -> MessageDraft:
        if self.encoding == "base64":
            try:
                body = base64.b64decode(self.body, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidRequest(
                    "body is not valid base64", code="INVALID_BODY_ENCODING"
                ) from None
        else:
            body = self.body.encode("utf-8", errors="surrogatepass")
        return MessageDraft(
            body=body,
            encoding=Encoding(self.encoding),
            tags=self.tags,
            keys=tuple(self.keys),
            properties=self.properties,
            sharding_key=self.sharding_key,
            queue_id=self.queue_id,
            delay_level=self.delay_level,
            deliver_at=self.deliver_at,
            msg_id=self.msg_id,
        )


class MessageOut(BaseModel):
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    body: str
    encoding: str
    tags: str | None = None
    keys: list[str] = Field(default_factory=list)
    properties: dict[str, str] = Field(default_factory=dict)
    sharding_key: str | None = None
    born_at: str
    stored_at: str
    deliver_at: str | None = None
    reconsume_times: int = 0
    transaction_id: str | None = None


class BatchIn(Strict):
    messages: list[MessageIn] = Field(min_length=1, max_length=1000)


class SendResultOut(BaseModel):
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int | None = Field(
        description="Offset in the topic's queue; null while a delayed message waits"
    )
    status: Literal["SEND_OK"] = "SEND_OK"
    duplicate: bool = False
    deliver_at: str | None = None


class BatchResultOut(BaseModel):
    results: list[SendResultOut]


# -- topics --------------------------------------------------------------------------------------


class TopicIn(Strict):
    name: str = Field(min_length=1, max_length=255)
    queues: int | None = Field(None, ge=1, le=1024, description="Default: default_topic_queues")
    order: bool = False


class QueueOut(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int


class TopicOut(BaseModel):
    name: str
    queues: int
    order: bool
    perm: int
    created_at: str
    queue_offsets: list[QueueOut]


class TopicListOut(BaseModel):
    topics: list[TopicOut]


# -- transactions --------------------------------------------------------------------------------


class TransactionIn(MessageIn):
    topic: str = Field(min_length=1, max_length=255)
    producer_group: Name
    check_immunity_seconds: float | None = Field(None, ge=0, le=86_400 * 7)


class HalfOut(BaseModel):
    transaction_id: str
    msg_id: str
    state: Literal["PREPARED"] = "PREPARED"
    duplicate: bool = False


class DecisionIn(Strict):
    producer_group: Name | None = Field(
        None, description="The half's producer group; may be left out by an operator"
    )
    from_check: bool = False


class ResolutionOut(BaseModel):
    transaction_id: str
    state: Literal["COMMITTED", "ROLLED_BACK"]
    msg_id: str
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None


class TransactionOut(BaseModel):
    transaction_id: str
    state: Literal["PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED"]
    producer_group: str
    topic: str
    msg_id: str
    check_times: int
    created_at: str
    resolved_at: str | None = None
    resolved_by: Literal["producer", "check", "operator"] | None = None


class TransactionListOut(BaseModel):
    transactions: list[TransactionOut]


# -- producers -----------------------------------------------------------------------------------


class HeartbeatIn(Strict):
    client_id: str = Field(min_length=1, max_length=255)
    callback_url: str | None = Field(None, max_length=2048)
    topics: list[Annotated[str, Field(max_length=255)]] = Field(
        default_factory=list, max_length=1000, description="Topics this instance produces to"
    )


class HeartbeatOut(BaseModel):
    producer_group: str
    client_id: str
    expires_in_seconds: float


# -- queries -------------------------------------------------------------------------------------


class MessageCopyOut(BaseModel):
    topic: str
    queue_id: int
    queue_offset: int
    stored_at: str


class MessageLifeOut(MessageOut):
    stage: Literal["STORED", "SCHEDULED", "HALF", "COMMITTED", "ROLLED_BACK", "DISCARDED"]
    transaction_state: str | None = None
    copies: list[MessageCopyOut]


class MessageListOut(BaseModel):
    messages: list[MessageOut]


class EchoOut(BaseModel):
    echo: Any = None
