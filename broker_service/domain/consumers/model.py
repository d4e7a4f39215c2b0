"""Consumer groups' records: groups, subscriptions and their tag filters, offsets and deliveries."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from broker_service.domain import names
from broker_service.domain.errors import InvalidRequest
from broker_service.domain.messages.model import PROP_RETRY_TOPIC as PROP_RETRY_TOPIC
from broker_service.domain.messages.model import StoredMessage

# Properties the broker puts on retry and dead-letter copies (RocketMQ's names where it has one);
# PROP_RETRY_TOPIC, the topic a copy was first sent to, is the messages' (a message is read as
# its topic's wherever it is copied).
PROP_ORIGIN_QUEUE_ID = "ORIGIN_QID"
PROP_ORIGIN_OFFSET = "ORIGIN_OFFSET"
PROP_DLQ_ORIGIN_GROUP = "DLQ_ORIGIN_GROUP"


class MessageModel(StrEnum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFrom(StrEnum):
    FIRST_OFFSET = "FIRST_OFFSET"
    LAST_OFFSET = "LAST_OFFSET"
    TIMESTAMP = "TIMESTAMP"


class DeliveryState(StrEnum):
    INFLIGHT = "INFLIGHT"
    RETRYING = "RETRYING"  # an orderly retry waiting at the head of its queue
    ACKED = "ACKED"
    NACKED = "NACKED"  # a copy went to %RETRY%{group}
    EXPIRED = "EXPIRED"  # its invisibility ran out; a newer delivery of the message took over
    DEAD = "DEAD"  # a copy went to %DLQ%{group}


OPEN_STATES = (DeliveryState.INFLIGHT.value, DeliveryState.RETRYING.value)


def retry_topic(group: str) -> str:
    return f"{names.RETRY_PREFIX}{group}"


def dlq_topic(group: str) -> str:
    return f"{names.DLQ_PREFIX}{group}"


@dataclass(frozen=True, slots=True)
class ConsumerGroup:
    name: str
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET
    consume_timestamp: int | None = None
    max_reconsume_times: int | None = None
    orderly: bool = False
    created_at: int = 0

    @property
    def broadcasting(self) -> bool:
        return self.message_model is MessageModel.BROADCASTING

    def same_config(self, other: ConsumerGroup) -> bool:
        return (
            self.message_model,
            self.consume_from,
            self.consume_timestamp,
            self.max_reconsume_times,
            self.orderly,
        ) == (
            other.message_model,
            other.consume_from,
            other.consume_timestamp,
            other.max_reconsume_times,
            other.orderly,
        )


@dataclass(frozen=True, slots=True)
class TagFilter:
    """RocketMQ's tag expression: ``*`` (every message) or ``TagA || TagB``."""

    expression: str
    tags: frozenset[str] | None  # None: every message

    @classmethod
    def parse(cls, expression: str) -> TagFilter:
        text = expression.strip()
        if text in ("", "*"):
            return cls("*", None)
        tags = [part.strip() for part in text.split("||")]
        if any(not tag for tag in tags):
            raise InvalidRequest(
                f"expression {expression!r} must be '*' or tags joined by '||'",
                code="INVALID_EXPRESSION",
                expression=expression,
            )
        for tag in tags:
            try:
                names.check_tag(tag)
            except InvalidRequest as error:
                raise InvalidRequest(
                    f"expression {expression!r}: {error.message}",
                    code="INVALID_EXPRESSION",
                    expression=expression,
                ) from None
        unique = sorted(set(tags))
        return cls(" || ".join(unique), frozenset(unique))

    def matches(self, tags: str | None) -> bool:
        return self.tags is None or (tags is not None and tags in self.tags)


@dataclass(frozen=True, slots=True)
class Subscription:
    consumer_group: str
    topic: str
    expression: str
    created_at: int

    @property
    def filter(self) -> TagFilter:
        return TagFilter.parse(self.expression)


@dataclass(frozen=True, slots=True)
class Member:
    consumer_group: str
    client_id: str
    last_seen_at: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """A group's (or, broadcasting, a member's) progress in one queue."""

    consumer_group: str
    topic: str
    queue_id: int
    client_id: str
    committed_offset: int
    pulled_offset: int
    expired: int = 0  # messages retention purged before the group (member) passed them


@dataclass(frozen=True, slots=True)
class Delivery:
    """One hand-out of a message to a member: the in-flight lease behind a receipt handle."""

    id: int
    consumer_group: str
    client_id: str
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    receipt_handle: str
    state: DeliveryState
    reconsume_times: int
    delivered_at: int
    invisible_until: int
    finished_at: int | None = None

    def ended(self, state: DeliveryState, at: int) -> Delivery:
        """This delivery finished in ``state`` (acked, nacked, expired, dead) at ``at``."""
        return replace(self, state=state, finished_at=at)


@dataclass(frozen=True, slots=True)
class NewDelivery:
    consumer_group: str
    client_id: str
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    receipt_handle: str
    reconsume_times: int
    delivered_at: int
    invisible_until: int


@dataclass(frozen=True, slots=True)
class Receiving:
    """One receive: who asks (the member ``client_id`` of ``group``) and for what -- up to
    ``max_messages`` of ``topic`` (None: every subscription), each invisible to the rest of the
    group for ``invisible_seconds``, waiting up to ``wait_seconds`` for one to come (long poll);
    ``max_per_queue``: an orderly group's most consecutive messages of one queue (a batch
    consumer's batch).  The signed request's nonce is not part of it: like every consumer use
    case's, it is the service call's."""

    group: str
    client_id: str
    topic: str | None
    max_messages: int
    invisible_seconds: float
    wait_seconds: float
    max_per_queue: int = 1


@dataclass(frozen=True, slots=True)
class Delivered:
    """A message as handed to a consumer: the stored message, shown under its original topic (a
    retry copy shows the topic it was first sent to, as RocketMQ's clients do)."""

    message: StoredMessage
    topic: str
    receipt_handle: str
    reconsume_times: int
    invisible_until: int


@dataclass(frozen=True, slots=True)
class AckResult:
    acked: int
    stale: list[str]
    # Topics whose queues an ack freed (orderly groups): waiting receives may go on at once.
    freed_topics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NackResult:
    receipt_handle: str
    msg_id: str
    reconsume_times: int
    outcome: str  # RETRY (a copy waits in %RETRY%), RETRY_IN_PLACE (orderly), DLQ
    deliver_at: int | None


@dataclass(frozen=True, slots=True)
class QueueView:
    """One row of a group's view: a queue, and the group's (broadcasting: a member's) place in it."""

    topic: str
    queue_id: int
    client_id: str
    committed_offset: int | None
    max_offset: int
    lag: int  # the lag rule of domain/consumers/backlog.py, for this row's offset
    in_flight: int
    retrying: int
    dead: int
    expired: int = 0


@dataclass(frozen=True, slots=True)
class GroupView:
    group: ConsumerGroup
    subscriptions: list[Subscription]
    members: list[Member]
    live_since: int
    queues: list[QueueView]
    retrying: int
    dead: int
    # Per queue the group's lag (broadcasting: its least advanced live member's), summed over
    # its subscribed topics (``lag``, as ``halfmq_consumer_lag_messages``) and over its retry
    # topic (``retry_lag``, as ``halfmq_retry_messages``).
    lag: int
    retry_lag: int


@dataclass(frozen=True, slots=True)
class DeadMessage:
    message: StoredMessage
    original_topic: str | None
    resent_at: int | None
