"""The store's messages role: topics and their queues, appending and reading messages, and the
delayed messages parked in ``SCHEDULE_TOPIC_XXXX``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from broker_service.domain.messages.model import (
    PendingMessage,
    PlainBatch,
    QueueInfo,
    StoredMessage,
    Topic,
)


@dataclass(frozen=True, slots=True)
class MessageQuery:
    topic: str | None = None
    key: str | None = None
    begin: int | None = None
    end: int | None = None
    limit: int = 32


class MessageStore(Protocol):
    # topics and queues
    def get_topic(self, name: str) -> Topic | None: ...
    def list_topics(self) -> list[Topic]: ...
    def create_topic(self, topic: Topic) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def queue_infos(self, topic: str) -> list[QueueInfo]: ...

    # appending: visible to later calls of the same batch; offsets filled before the commit
    def append(self, message: PendingMessage) -> None: ...
    def append_all(self, messages: Sequence[PendingMessage]) -> None: ...
    def append_batch(self, batch: PlainBatch) -> None: ...
    def find_sent(self, dedup_keys: Sequence[str]) -> dict[str, StoredMessage | PendingMessage]: ...

    # reading
    def get_message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None: ...
    def find_messages(self, msg_id: str) -> list[StoredMessage]: ...
    def find_messages_of(self, msg_ids: Sequence[str]) -> dict[str, list[StoredMessage]]:
        """:meth:`find_messages` of several ids in one read: the copies of each id found."""
        ...

    def query_messages(self, query: MessageQuery) -> list[StoredMessage]: ...
    def real_message_of(
        self, transaction_id: str, topic: str
    ) -> StoredMessage | PendingMessage | None: ...

    # delayed messages
    def claim_due_delayed(self, topic: str, now: int, limit: int) -> list[StoredMessage]: ...
    def mark_released(self, message_id: int, at: int) -> None: ...
    def next_delayed_at(self, topic: str) -> int | None: ...
