"""The messages and topics of the REST contract (docs/api.md): sending one message or a batch, the
receipts, topics and their queues, and messages found by id, key or time."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from typing_extensions import TypedDict

from broker_service.api.schemas.common import (
    DEFAULT_LEVEL_COUNT,
    TAG_PATTERN,
    TEXT_PATTERN,
    USER_TOPIC_SCHEMA,
    Strict,
    Text,
    TimeIn,
    json_number,
    storable,
)
from broker_service.domain.errors import InvalidRequest
from broker_service.domain.messages.model import (
    RESERVED_PROPERTIES,
    Encoding,
    MessageDraft,
    PlainBatch,
)

PROPERTY_NAME_SCHEMA: dict[str, Any] = {
    "minLength": 1,
    "maxLength": 128,
    "pattern": TEXT_PATTERN,
    "not": {"enum": sorted(RESERVED_PROPERTIES)},
}


# -- messages ------------------------------------------------------------------------------------


BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


_ENCODINGS = {encoding.value: encoding for encoding in Encoding}  # cheaper than Encoding(value)


def body_bytes(body: str, encoding: str) -> bytes:
    """A message's body as the bytes it stands for (``encoding``: utf-8 or base64)."""
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest("body is not valid base64", code="INVALID_BODY_ENCODING") from None
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            "body is not valid Unicode text (a lone surrogate); send bytes as base64",
            code="INVALID_BODY_ENCODING",
        ) from None


class MessageIn(Strict):
    # A base64 body must decode (else 422 INVALID_BODY_ENCODING), as the schema says with if/then.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "if": {"properties": {"encoding": {"const": "base64"}}, "required": ["encoding"]},
            "then": {"properties": {"body": {"pattern": BASE64_PATTERN}}},
        },
    )

    body: str = Field(description="The body: text, or base64 when encoding is base64")
    encoding: Literal["utf-8", "base64"] = "utf-8"
    # tags and keys are checked by the domain (422 INVALID_TAG, INVALID_KEYS); described here.
    tags: (
        Annotated[
            str,
            AfterValidator(storable),
            Field(json_schema_extra={"pattern": TAG_PATTERN}),
        ]
        | None
    ) = Field(None, description="1-128 characters, no '|' and no whitespace")
    keys: list[
        Annotated[
            str,
            AfterValidator(storable),
            Field(json_schema_extra={"minLength": 1, "maxLength": 128, "pattern": TEXT_PATTERN}),
        ]
    ] = Field(default_factory=list, json_schema_extra={"maxItems": 32})
    properties: dict[
        Annotated[str, AfterValidator(storable), Field(min_length=1, max_length=128)], Text
    ] = Field(
        default_factory=dict,
        description="Checked by the domain: the broker's own names are 422 RESERVED_PROPERTY",
        json_schema_extra={"propertyNames": PROPERTY_NAME_SCHEMA},
    )
    sharding_key: Annotated[Text, Field(min_length=1, max_length=255)] | None = None
    queue_id: int | None = Field(
        None, ge=0, le=1_000_000, description="0 to the topic's queues - 1 (else 422)"
    )
    delay_level: (
        Annotated[
            int,
            Field(ge=0, le=1000, json_schema_extra={"maximum": DEFAULT_LEVEL_COUNT}),
        ]
        | None
    ) = Field(
        None,
        description="RocketMQ's levels 1-18 (as many as the broker's message_delay_level has; "
        "others are 422 INVALID_DELAY_LEVEL); 0 or null: no delay",
    )
    deliver_at: TimeIn | None = None
    msg_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")

    _numbers = field_validator("queue_id", "delay_level", mode="before")(json_number)

    def body_bytes(self) -> bytes:
        return body_bytes(self.body, self.encoding)

    def to_draft(self) -> MessageDraft:
        # In field order, positionally: a batch makes up to 1,000 of these per request.
        return MessageDraft(
            self.body_bytes(),
            _ENCODINGS[self.encoding],
            self.tags,
            tuple(self.keys),
            self.properties,
            self.sharding_key,
            self.queue_id,
            self.delay_level,
            self.deliver_at,
            self.msg_id,
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


BATCH_MAX = 1000


class BatchIn(Strict):
    messages: list[MessageIn] = Field(min_length=1, max_length=BATCH_MAX)


# -- a batch of bodies alone, read as columns ------------------------------------------------------
# The common batch (messages with a body and nothing else) is read from the JSON into a dict per
# message rather than a MessageIn model per message, and sent as a PlainBatch: less validation per
# message, and no model, draft or receipt record per message after it (measured: bench/README.md,
# "Figures, fifth round", the batch body validated from its bytes).  These
# two describe only what ``plain_batch`` reads: BatchIn and MessageIn stay the contract (and the
# OpenAPI schema), and every batch they do not match goes through them.


class _PlainMessage(TypedDict):
    # Other fields pass here (and the batch is then not plain), so that a batch that has them is
    # looked at once more than before, not validated against two models: a look that costs less
    # than BatchIn's validation (bench/README.md, "Figures, fifth round").
    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    body: str
    encoding: NotRequired[Literal["utf-8", "base64"]]


class _PlainBatchIn(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    messages: Annotated[list[_PlainMessage], Field(min_length=1, max_length=BATCH_MAX)]


_PLAIN_BATCH = TypeAdapter(_PlainBatchIn)
_PLAIN_FIELDS = {"body", "encoding"}


def plain_batch(raw: bytes) -> PlainBatch | None:
    """The batch in ``raw`` (JSON) as a :class:`PlainBatch` if it is a valid batch whose every
    message is a body alone (``encoding`` may be said), else None: validate it as a BatchIn."""
    try:
        messages = _PLAIN_BATCH.validate_json(raw)["messages"]
    except ValidationError:
        return None
    if not all(len(m) == 1 or m.keys() <= _PLAIN_FIELDS for m in messages):
        return None
    encodings: list[str] = [m.get("encoding", "utf-8") for m in messages]
    bodies = [
        body_bytes(m["body"], encoding) for m, encoding in zip(messages, encodings, strict=True)
    ]
    return PlainBatch(bodies, encodings)


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
    name: str = Field(json_schema_extra=USER_TOPIC_SCHEMA)
    queues: int | None = Field(None, ge=1, le=1024, description="Default: default_topic_queues")
    order: StrictBool = False  # JSON's true/false, not 0/1

    _numbers = field_validator("queues", mode="before")(json_number)


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
