"""The store's consumer roles, one per aggregate: groups (with their subscriptions and members),
each queue's progress, the deliveries behind receipt handles, the retry and dead-letter copies, and
the trace of what happened to a message.  A unit of work receives them all (``StoreTx``); a
function that needs one of them names that one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from broker_service.domain.consumers.model import (
    ConsumerGroup,
    Delivery,
    DeliveryState,
    Member,
    NewDelivery,
    QueueProgress,
    Subscription,
)
from broker_service.domain.messages.model import QueueInfo, StoredMessage


class GroupQueueProgress(NamedTuple):
    """A queue a consumer group reads (of a subscribed topic, or of its retry topic) and one
    progress row of the group in it (broadcasting: a member's), as the backlog read finds them."""

    group: str
    broadcasting: bool
    topic: str
    queue_id: int
    max_offset: int
    client_id: str | None  # None: no progress in this queue yet; '' for a clustering group
    committed_offset: int | None
    last_seen_at: int | None  # the member's, when it is one still recorded


class GroupStore(Protocol):
    """Consumer groups, their subscriptions and members, and what the backlog reads of them all."""

    def get_consumer_group(self, name: str) -> ConsumerGroup | None: ...
    def create_consumer_group(self, group: ConsumerGroup) -> bool: ...
    def delete_consumer_group(self, group: str) -> None: ...
    def list_subscriptions(self, group: str) -> list[Subscription]: ...
    def put_subscription(self, subscription: Subscription) -> None: ...
    def touch_consumer(self, group: str, client_id: str, at: int) -> None: ...
    def list_consumers(self, group: str) -> list[Member]: ...
    def all_groups_progress(self) -> list[GroupQueueProgress]:
        """Every group's queues and progress: one statement, whatever the number of groups."""
        ...

    def dead_letter_counts(self) -> dict[str, int]:
        """Every group's messages in its DLQ not yet resent (0 for none): one statement."""
        ...


class ProgressStore(Protocol):
    """A group's (a member's) progress in each queue it reads, and reading a queue from an offset."""

    @property
    def claims_need_locks(self) -> bool:
        """Whether other brokers may claim beside this one (a receive then locks what it takes)."""
        ...

    def init_progress(self, progress: Sequence[QueueProgress], at: int) -> None: ...
    def save_progress(self, progress: QueueProgress | Sequence[QueueProgress], at: int) -> None: ...
    def progress_overview(
        self, group: str, topics: Sequence[str], client_id: str
    ) -> list[tuple[QueueInfo, QueueProgress | None]]: ...
    def lock_candidates(
        self, group: str, topics: Sequence[str], client_id: str
    ) -> list[tuple[QueueInfo, QueueProgress]]: ...
    def advance_committed(self, keys: Sequence[tuple[str, str, int, str]], at: int) -> None: ...
    def list_progress(self, group: str) -> list[QueueProgress]: ...
    def oldest_open_offset(
        self, group: str, topic: str, queue_id: int, client_id: str
    ) -> int | None: ...
    def first_offset_since(self, topic: str, queue_id: int, at: int) -> int | None: ...
    def messages_from(
        self, topic: str, queue_id: int, offset: int, limit: int
    ) -> list[StoredMessage]: ...


class DeliveryStore(Protocol):
    """The deliveries behind receipt handles: claimed, leased until a time, finished."""

    def add_deliveries(self, new: Sequence[NewDelivery]) -> None: ...
    def claim_due_deliveries(
        self, group: str, client_id: str | None, now: int, limit: int
    ) -> list[Delivery]: ...
    def next_due_at(self, group: str) -> int | None: ...
    def get_delivery(self, group: str, receipt_handle: str) -> Delivery | None: ...
    def finish_deliveries(
        self, group: str, handles: Sequence[str], state: DeliveryState, now: int
    ) -> list[Delivery]: ...
    def set_delivery(self, delivery: Delivery, moved: Delivery) -> bool:
        """Move ``delivery`` on from the state it was read in to ``moved``'s state, receipt
        handle, invisibility and end; False if it moved meanwhile."""
        ...

    def expire_queue_deliveries(self, group: str, topic: str, queue_id: int, now: int) -> int: ...
    def open_delivery_counts(
        self, group: str, now: int
    ) -> dict[tuple[str, int, str], list[int]]: ...
    def deliveries_of(self, msg_id: str) -> list[Delivery]: ...


class CopyStore(Protocol):
    """The copies a group's retries and dead letters leave in its retry and DLQ topics."""

    def topic_messages(self, topic: str, limit: int) -> list[StoredMessage]: ...
    def find_in_topic(self, topic: str, msg_id: str) -> list[StoredMessage]: ...
    def waiting_retries(self, retry_topic: str) -> list[StoredMessage]: ...


class TraceStore(Protocol):
    """The trace of what happened to a message (its events, each with an actor and a time)."""

    def add_trace(
        self, msg_id: str, event: str, actor: str, at: int, detail: str | None = None
    ) -> None: ...
    def add_traces(self, events: Sequence[tuple[str, str, str, int, str | None]]) -> None:
        """Several (msg_id, event, actor, at, detail JSON) at once: one statement, many rows."""
        ...

    def trace_events_of(self, msg_id: str) -> list[tuple[int, str, str, str | None]]:
        """The message's trace, but only the newest of its CHECKED events (a half no instance
        answers gets one a round): :meth:`trace_event_count` says how many there are."""
        ...

    def trace_event_count(self, msg_id: str, event: str) -> int: ...
