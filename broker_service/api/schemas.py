"""The REST contract's bodies (api.md), as pydantic models -- they describe ``/openapi.json``."""

from __future__ import annotations

import base64
import binascii
import functools
import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from typing_extensions import TypedDict

from broker_service.domain.errors import InvalidRequest
from broker_service.domain.model import RESERVED_PROPERTIES, Encoding, MessageDraft, PlainBatch
from broker_service.settings import DEFAULT_DELAY_LEVELS, parse_delay_levels

# Epoch milliseconds a time may take: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z (RFC 3339's years).
MIN_TIME_MS = -62_135_596_800_000
MAX_TIME_MS = 253_402_300_799_999


def rfc3339(ms: int | None) -> str | None:
    """Epoch milliseconds as an RFC 3339 UTC time with milliseconds (``...T12:00:00.123Z``)."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    return f"{_rfc3339_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=4096)
def _rfc3339_second(seconds: int) -> str:
    # Answers name the same few seconds many times over (a receive of 32 messages, 4 times each).
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="seconds")[:-6]


def _parse_time(value: Any) -> Any:
    """RFC 3339 strings or epoch milliseconds (numbers or digit strings), to epoch milliseconds."""
    if isinstance(value, bool):
        raise ValueError("a time is an RFC 3339 string or epoch milliseconds")
    if isinstance(value, str):
        text = value.strip()
        if not (text.isascii() and text.lstrip("-").isdigit()):
            return _parse_rfc3339(text)
        value = int(text)
    if isinstance(value, float):
        # Epoch milliseconds are whole (the schema says integer): 1.5 is not a time.
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError("epoch milliseconds must be a finite whole number")
        value = int(value)
    if isinstance(value, int) and not MIN_TIME_MS <= value <= MAX_TIME_MS:
        raise ValueError(f"{value} epoch milliseconds is outside the years 0001-9999")
    return value


def _parse_rfc3339(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time or epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _json_number(value: Any) -> Any:
    """JSON numbers only: pydantic's lax mode would also take true/false and "2"."""
    if isinstance(value, bool | str):
        raise ValueError("must be a JSON number")
    return value


TimeIn = Annotated[
    int,
    BeforeValidator(_parse_time),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "format": "date-time"},
                {"type": "integer", "minimum": MIN_TIME_MS, "maximum": MAX_TIME_MS},
            ],
            "description": "RFC 3339 time or epoch milliseconds",
        }
    ),
]

# Names are checked by the domain (400 INVALID_TOPIC_NAME, SYSTEM_TOPIC, ...); the schema describes them.
NAME_SCHEMA: dict[str, Any] = {
    "pattern": "^[A-Za-z0-9_-]{1,127}$",
    "minLength": 1,
    "maxLength": 127,
}
USER_TOPIC_SCHEMA: dict[str, Any] = {
    **NAME_SCHEMA,
    "not": {"pattern": "^(RMQ_SYS_|SCHEDULE_TOPIC_)"},
    "description": "A topic name; RMQ_SYS_*, SCHEDULE_TOPIC_*, %RETRY%*, %DLQ%* are the broker's own",
}
Name = Annotated[str, Field(min_length=1, max_length=127, pattern=NAME_SCHEMA["pattern"])]


def _storable(value: str) -> str:
    """Text the stores can keep: valid Unicode (no lone surrogates) and no NUL (PostgreSQL)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (it holds a lone surrogate)") from None
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


DEFAULT_LEVEL_COUNT = len(parse_delay_levels(DEFAULT_DELAY_LEVELS))
TEXT_PATTERN = "^[^\\u0000]*$"
# Python's \s (which the domain's checks use) spelled out: JSON Schema's \s is ECMAScript's, which
# lacks \x1c-\x1f and \x85 and has \ufeff.
WHITESPACE = (
    "\\t-\\r\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
TAG_CHAR = f"[^|\\u0000{WHITESPACE}]"
TAG_PATTERN = f"^{TAG_CHAR}{{1,128}}$"
_GAP = f"[{WHITESPACE}]*"
EXPRESSION_PATTERN = (
    f"^{_GAP}(\\*|{TAG_CHAR}{{1,128}}({_GAP}\\|\\|{_GAP}{TAG_CHAR}{{1,128}})*)?{_GAP}$"
)
URL_PATTERN = f"^https?://[^\\u0000{WHITESPACE}]+$"
PROPERTY_NAME_SCHEMA: dict[str, Any] = {
    "minLength": 1,
    "maxLength": 128,
    "pattern": TEXT_PATTERN,
    "not": {"enum": sorted(RESERVED_PROPERTIES)},
}
Storable = Annotated[str, AfterValidator(_storable)]
Text = Annotated[Storable, Field(json_schema_extra={"pattern": TEXT_PATTERN})]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    code: str = Field(examples=["TOPIC_NOT_FOUND"])
    message: str
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorEnvelope(BaseModel):
    error: ErrorBody


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
            AfterValidator(_storable),
            Field(json_schema_extra={"pattern": TAG_PATTERN}),
        ]
        | None
    ) = Field(None, description="1-128 characters, no '|' and no whitespace")
    keys: list[
        Annotated[
            str,
            AfterValidator(_storable),
            Field(json_schema_extra={"minLength": 1, "maxLength": 128, "pattern": TEXT_PATTERN}),
        ]
    ] = Field(default_factory=list, json_schema_extra={"maxItems": 32})
    properties: dict[
        Annotated[str, AfterValidator(_storable), Field(min_length=1, max_length=128)], Text
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

    _numbers = field_validator("queue_id", "delay_level", mode="before")(_json_number)

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
# message rather than a MessageIn model per message, and sent as a PlainBatch: 0.33 against 0.94 us
# of validation per message, and no model, draft or receipt record per message after it.  These
# two describe only what ``plain_batch`` reads: BatchIn and MessageIn stay the contract (and the
# OpenAPI schema), and every batch they do not match goes through them.


class _PlainMessage(TypedDict):
    # Other fields pass here (and the batch is then not plain), so that a batch that has them is
    # looked at once more than before, not validated against two models: measured on 1,000
    # messages with keys, this look costs 1.8 ms before BatchIn's 4.3 ms.
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

    _numbers = field_validator("queues", mode="before")(_json_number)


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
    topic: str = Field(json_schema_extra=USER_TOPIC_SCHEMA)
    producer_group: str = Field(json_schema_extra=NAME_SCHEMA)
    check_immunity_seconds: float | None = Field(None, ge=0, le=86_400 * 7)

    _immunity = field_validator("check_immunity_seconds", mode="before")(_json_number)


class HalfOut(BaseModel):
    transaction_id: str
    msg_id: str
    state: Literal["PREPARED"] = "PREPARED"
    duplicate: bool = False


class DecisionIn(Strict):
    producer_group: Name | None = Field(
        None, description="The half's producer group; may be left out by an operator"
    )
    from_check: StrictBool = False


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


# -- producers -----------------------------------------------------------------------------------


class HeartbeatIn(Strict):
    client_id: Annotated[Text, Field(min_length=1, max_length=255)]
    callback_url: Annotated[str, Field(max_length=2048, pattern=URL_PATTERN)] | None = Field(
        None, description="Where the broker POSTs check requests (push mode)"
    )
    topics: list[Annotated[Text, Field(max_length=255)]] = Field(
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


def _unicode_only(value: Any) -> Any:
    """JSON the broker can answer with: valid Unicode strings, nested at most MAX_JSON_DEPTH deep
    (walked without recursion, as JSON can nest deeper than Python's stack)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("strings must be valid Unicode (no lone surrogates)") from None
        elif isinstance(item, dict):
            pending.extend((k, depth) for k in item)
            pending.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            pending.extend((v, depth + 1) for v in item)
    return value


MAX_JSON_DEPTH = 64
AnyJson = Annotated[Any, AfterValidator(_unicode_only)]


class EchoOut(BaseModel):
    echo: Any = None
