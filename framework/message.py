"""Messages, states and results: frozen values named as in RocketMQ."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum
from typing import Any

import orjson

from framework.errors import BodyDecodeError


def new_msg_id() -> str:
    """A client-made, time-ordered unique id: the broker deduplicates retransmits on it."""
    return f"{time.time_ns() // 1_000_000:012X}{secrets.token_hex(10).upper()}"


class LocalTransactionState(Enum):
    """What the local transaction decided (RocketMQ's spelling, UNKNOW included)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"

    @property
    def check_answer(self) -> str:
        """The word a push check answers with."""
        return {"COMMIT_MESSAGE": "COMMIT", "ROLLBACK_MESSAGE": "ROLLBACK"}.get(
            self.value, "UNKNOWN"
        )


class SendStatus(Enum):
    SEND_OK = "SEND_OK"


class ConsumeResult(Enum):
    """What a consumer's handler decided: ack, or give the message back for a later retry."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass(frozen=True, slots=True)
class Message:
    """A message to send, or one that was delivered or checked back.

    ``body`` is ``str`` (sent as UTF-8 text) or ``bytes`` (sent as base64).  Every message gets a
    client-made ``msg_id`` when it is built, so sending the same object again is deduplicated by
    the broker.  The delivery fields (``queue_id``, ``queue_offset``, ``receipt_handle``...) are
    filled in on messages the broker hands out.
    """

    topic: str
    body: bytes | str = b""
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    sharding_key: str | None = None
    queue_id: int | None = None
    delay_level: int | None = None
    deliver_at: datetime | int | None = None
    msg_id: str = field(default_factory=new_msg_id)
    transaction_id: str | None = None
    queue_offset: int | None = None
    reconsume_times: int = 0
    receipt_handle: str | None = None
    born_at: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):
            raise TypeError("Message.keys is a sequence of strings, e.g. keys=['t-42']")
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "properties", dict(self.properties))

    @property
    def text(self) -> str:
        """The body as text (UTF-8); another encoding is a :class:`BodyDecodeError`."""
        if isinstance(self.body, str):
            return self.body
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyDecodeError(
                "UTF-8 text", self.body, exc.reason, topic=self.topic, msg_id=self.msg_id
            ) from exc

    @property
    def data(self) -> bytes:
        """The body as bytes."""
        return self.body.encode("utf-8") if isinstance(self.body, str) else self.body

    def json(self) -> Any:
        """The body parsed as JSON; a body that is not JSON is a :class:`BodyDecodeError`
        naming this message."""
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError as exc:
            raise BodyDecodeError(
                "JSON", self.data, exc.msg, topic=self.topic, msg_id=self.msg_id
            ) from exc

    def evolve(self, **changes: Any) -> Message:
        return replace(self, **changes)

    @property
    def key(self) -> str | None:
        """The first key: the business id."""
        return self.keys[0] if self.keys else None


@dataclass(frozen=True, slots=True)
class SendResult:
    """A message stored in its topic (``queue_offset`` is None while a delayed message waits)."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int | None
    send_status: SendStatus = SendStatus.SEND_OK
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """What ``send_message_in_transaction`` did: the half was stored (``send_status``), the local
    transaction answered ``local_state``, and the broker took the decision (``resolution``:
    ``COMMITTED``, ``ROLLED_BACK``, or None when UNKNOW, when the end did not reach a broker -- the
    check-back resolves it --, or when it was sent one way, ``end_oneway``).  ``error`` is the
    local transaction's exception, or the end's."""

    send_status: SendStatus
    transaction_id: str
    msg_id: str
    local_state: LocalTransactionState
    message: Message
    resolution: str | None = None
    error: BaseException | None = None


def to_wire(message: Message) -> dict[str, Any]:
    """The message as docs/api.md's JSON ("A message as sent"), only the fields that are set."""
    if isinstance(message.body, str):
        body, encoding = message.body, "utf-8"
    else:
        body, encoding = base64.b64encode(message.body).decode("ascii"), "base64"
    wire: dict[str, Any] = {"body": body, "encoding": encoding, "msg_id": message.msg_id}
    if message.tags is not None:
        wire["tags"] = message.tags
    if message.keys:
        wire["keys"] = list(message.keys)
    if message.properties:
        wire["properties"] = dict(message.properties)
    for name in ("sharding_key", "queue_id", "delay_level"):
        value = getattr(message, name)
        if value is not None:
            wire[name] = value
    if isinstance(message.deliver_at, datetime):
        wire["deliver_at"] = int(message.deliver_at.timestamp() * 1000)
    elif message.deliver_at is not None:
        wire["deliver_at"] = message.deliver_at
    return wire


def from_wire(data: Mapping[str, Any], topic: str | None = None) -> Message:
    """A delivered or checked-back message from its JSON."""
    body: bytes | str = data.get("body", "")
    if data.get("encoding") == "base64":
        body = base64.b64decode(str(body))
    return Message(
        topic=str(data.get("topic") or topic or ""),
        body=body,
        tags=data.get("tags"),
        keys=tuple(data.get("keys") or ()),
        properties=data.get("properties") or {},
        sharding_key=data.get("sharding_key"),
        queue_id=data.get("queue_id"),
        msg_id=str(data["msg_id"]),
        transaction_id=data.get("transaction_id"),
        queue_offset=data.get("queue_offset"),
        reconsume_times=int(data.get("reconsume_times") or 0),
        receipt_handle=data.get("receipt_handle"),
        born_at=data.get("born_at"),
    )
