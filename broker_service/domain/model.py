"""The broker's records: frozen where they are read, one mutable slot where the store fills offsets."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

import orjson

NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})


class TransactionState(StrEnum):
    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"


class Decision(StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"

    @property
    def final_state(self) -> TransactionState:
        if self is Decision.COMMIT:
            return TransactionState.COMMITTED
        return TransactionState.ROLLED_BACK


class ResolvedBy(StrEnum):
    PRODUCER = "producer"
    CHECK = "check"
    OPERATOR = "operator"


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


class MessageDraft(NamedTuple):
    """A message as a client sent it, validated; bodies already decoded to bytes.

    The records made per message on the hot path are NamedTuples: immutable like frozen
    dataclasses, and three times cheaper to make."""

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
        """What makes a retransmit the same message: everything but the born time."""
        digest = hashlib.sha256(self.body)
        digest.update(
            orjson.dumps(
                [
                    topic,
                    producer_group,
                    self.encoding.value,
                    self.tags,
                    list(self.keys),
                    dict(self.properties),
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


class TransactionRecord(NamedTuple):
    transaction_id: str
    msg_id: str
    producer_group: str
    topic: str
    half_offset: int
    real_queue_id: int
    state: TransactionState
    check_times: int
    created_at: int
    check_immunity_ms: int | None = None
    next_check_at: int | None = None
    resolved_at: int | None = None
    resolved_by: ResolvedBy | None = None
    discarded_at: int | None = None
    discard_reason: str | None = None
    check_client_id: str | None = None
    last_checked_at: int | None = None
    last_check_error: str | None = None
    last_check_error_at: int | None = None
    undelivered_since: int | None = None
    check_pending_pull: bool = False


@dataclass(frozen=True, slots=True)
class ProducerInstance:
    """A live member of a producer group, as its last heartbeat described it."""

    producer_group: str
    client_id: str
    callback_url: str | None
    topics: tuple[str, ...]
    last_heartbeat_at: int
    unreachable_until: int | None = None
    last_error: str | None = None
    last_error_at: int | None = None
    access_key: str | None = None

    @property
    def push(self) -> bool:
        """Checks are pushed to a callback URL; without one, the instance pulls them."""
        return self.callback_url is not None

    def reachable(self, now: int) -> bool:
        """False while a check that could not be delivered to it keeps it aside."""
        return self.unreachable_until is None or self.unreachable_until <= now
