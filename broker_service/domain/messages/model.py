"""The records of messages and topics: frozen where they are read, one mutable slot where the store
fills offsets."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from broker_service.domain import names

NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})


class Encoding(StrEnum):
    UTF8 = "utf-8"
    BASE64 = "base64"


# Properties the broker sets itself (RocketMQ's MessageConst names where it has one).
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QUEUE_ID = "REAL_QID"
PROP_PRODUCER_GROUP = "PGROUP"
PROP_TRANSACTION = "TRAN_MSG"
PROP_DELAY_LEVEL = "DELAY"
PROP_DELIVER_AT = "DELIVER_AT"
PROP_DECISION = "DECISION"
PROP_RESOLVED_BY = "RESOLVED_BY"
# The topic a retry or dead-letter copy was first sent to (set by the consumers' copies).
PROP_RETRY_TOPIC = "RETRY_TOPIC"
RESERVED_PROPERTIES = frozenset(
    {
        PROP_REAL_TOPIC,
        PROP_REAL_QUEUE_ID,
        PROP_PRODUCER_GROUP,
        PROP_TRANSACTION,
        PROP_DELAY_LEVEL,
        PROP_DELIVER_AT,
        PROP_DECISION,
        PROP_RESOLVED_BY,
    }
)


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    queues: int
    ordered: bool
    perm: int
    system: bool
    created_at: int


@dataclass(frozen=True, slots=True)
class QueueInfo:
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int


# W3C trace context and baggage a client puts among a message's properties (OpenTelemetry's
# propagators): where the message was sent from, not what it says.
TRACE_CONTEXT = frozenset({"traceparent", "tracestate", "baggage"})


class MessageDraft(NamedTuple):
    """A message as a client sent it, validated; bodies already decoded to bytes.

    The records made per message on the hot path are NamedTuples: immutable like frozen
    dataclasses, and cheaper to make (a tuple, no ``__init__`` written in Python)."""

    body: bytes
    encoding: Encoding = Encoding.UTF8
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = NO_PROPERTIES
    sharding_key: str | None = None
    queue_id: int | None = None
    delay_level: int | None = None
    deliver_at: int | None = None
    msg_id: str | None = None
    born_at: int | None = None

    def content_hash(self, topic: str, producer_group: str | None = None) -> str:
        """What makes a retransmit the same message: everything but the born time and the
        trace context (a retransmit made in another span is the same message)."""
        digest = hashlib.sha256(self.body)
        digest.update(
            orjson.dumps(
                [
                    topic,
                    producer_group,
                    self.encoding.value,
                    self.tags,
                    list(self.keys),
                    {k: v for k, v in self.properties.items() if k not in TRACE_CONTEXT},
                    self.sharding_key,
                    self.queue_id,
                    self.delay_level,
                    self.deliver_at,
                ],
                option=orjson.OPT_SORT_KEYS,
            )
        )
        return digest.hexdigest()


@dataclass(slots=True)
class PendingMessage:
    """A message appended in the current unit of work; the store fills ``queue_offset`` (and ``id``)
    when it writes the batch, before the unit of work is acknowledged."""

    topic: str
    queue_id: int
    msg_id: str
    body: bytes
    encoding: str
    born_at: int
    stored_at: int
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    sharding_key: str | None = None
    dedup_key: str | None = None
    content_hash: str | None = None
    transaction_id: str | None = None
    producer_group: str | None = None
    deliver_at: int | None = None
    reconsume_times: int = 0
    origin_id: int | None = None
    queue_offset: int = -1

    def copy_to(self, topic: str, queue_id: int, **changes: Any) -> PendingMessage:
        """This message, not yet stored, in another topic and queue, with ``changes`` (fields)."""
        return replace(self, topic=topic, queue_id=queue_id, queue_offset=-1, **changes)


@dataclass(slots=True)
class PlainBatch:
    """The messages of one send that carry a body and nothing else (no tags, keys, properties,
    sharding key, queue, delay or client-made msg_id), kept as columns: the common batch.

    Like a RocketMQ ``MessageBatch`` it is stored in one queue at consecutive offsets, so a send
    makes no record per message and is answered with the queue and the first offset.  The sender
    fills the ids, the queue and the times; the store fills ``first_offset`` when it writes the
    batch, before the send is acknowledged."""

    bodies: list[bytes]
    encodings: list[str]  # Encoding values, one per body
    topic: str = ""
    msg_ids: list[str] = field(default_factory=list)
    queue_id: int = -1
    born_at: int = 0
    stored_at: int = 0
    first_offset: int = -1


class StoredMessage(NamedTuple):
    id: int
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    body: bytes
    encoding: str
    tags: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    sharding_key: str | None
    transaction_id: str | None
    producer_group: str | None
    born_at: int
    stored_at: int
    deliver_at: int | None
    released_at: int | None
    reconsume_times: int
    origin_id: int | None
    content_hash: str | None
    dedup_key: str | None

    def copy_to(
        self,
        topic: str,
        queue_id: int,
        *,
        stored_at: int,
        properties: Mapping[str, str],
        deliver_at: int | None = None,
        reconsume_times: int | None = None,
    ) -> PendingMessage:
        """A copy of this message to append to ``topic`` (a release, a commit, a retry, a parked
        half): its id, body, tags, keys, sharding key, transaction and producer group, and its
        reconsume count unless ``reconsume_times`` says otherwise; ``origin_id`` points back here.
        Not copied: the dedup key and content hash (a copy is no retransmit), nor ``deliver_at``
        unless given."""
        return PendingMessage(
            topic,
            queue_id,
            self.msg_id,
            self.body,
            self.encoding,
            self.born_at,
            stored_at,
            self.tags,
            self.keys,
            properties,
            self.sharding_key,
            transaction_id=self.transaction_id,
            producer_group=self.producer_group,
            deliver_at=deliver_at,
            reconsume_times=self.reconsume_times if reconsume_times is None else reconsume_times,
            origin_id=self.id,
        )


# Reads a topic a message belongs to: True when the caller may read it.
MayRead = Callable[[str], bool]


def topic_of(message: StoredMessage) -> str | None:
    """The user topic a stored message belongs to, whichever topic holds it: its own topic, or for
    a copy in a system topic (a half, a delayed or parked message, a retry or dead-letter copy)
    the topic it was sent to.  None when the message names none (an op record, whose body is a
    half's offset): only an operator reads those."""
    if not names.is_system_topic(message.topic):
        return message.topic
    for prop in (PROP_RETRY_TOPIC, PROP_REAL_TOPIC):
        topic = message.properties.get(prop)
        if topic and not names.is_system_topic(topic):
            return topic
    return None


def readable(messages: Iterable[StoredMessage], may_read: MayRead | None) -> list[StoredMessage]:
    """The messages whose topic the caller may read (all of them without a guard): a message of
    a system topic is read as its real topic's, never as the system topic's."""
    if may_read is None:
        return list(messages)
    allowed: dict[str | None, bool] = {None: False}
    kept = []
    for message in messages:
        topic = topic_of(message)
        if topic not in allowed:
            allowed[topic] = may_read(topic)  # type: ignore[arg-type]
        if allowed[topic]:
            kept.append(message)
    return kept
