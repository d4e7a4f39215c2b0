"""The messages part of ``MemoryTx``: topics and queues, appending (offsets handed out at once,
dense per queue), reading, and the delayed messages parked in ``SCHEDULE_TOPIC_XXXX``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from broker_service.domain.messages.model import (
    PendingMessage,
    PlainBatch,
    QueueInfo,
    StoredMessage,
    Topic,
)
from broker_service.domain.ports import MessageQuery
from broker_service.memstore.state import Part, Queue

_SYSTEM = "RMQ_SYS_"  # halves, op records and parked halves: left out of a query naming no topic


class MessagePart(Part):
    # -- topics and queues ----------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic | None:
        return self.s.topics.get(name)

    def list_topics(self) -> list[Topic]:
        return sorted((t for t in self.s.topics.values() if not t.system), key=lambda t: t.name)

    def create_topic(self, topic: Topic) -> None:
        if topic.name in self.s.topics:
            raise ValueError(f"topic {topic.name!r} is stored already")
        self.put(self.s.topics, topic.name, topic)
        # Queues outlive a deleted topic, so a topic created again continues its offsets.
        for queue_id in range(topic.queues):
            self.queue_row(topic.name, queue_id)

    def delete_topic(self, name: str) -> None:
        self.drop(self.s.topics, name)

    def queue_infos(self, topic: str) -> list[QueueInfo]:
        return [
            QueueInfo(t, q, row.min_offset, row.next_offset)
            for (t, q), row in sorted(self.s.queues.items())
            if t == topic
        ]

    def queue_row(self, topic: str, queue_id: int) -> Queue:
        """The queue's row, made (empty) if it has none yet."""
        row = self.s.queues.get((topic, queue_id))
        if row is None:
            row = Queue(0, 0)
            self.put(self.s.queues, (topic, queue_id), row)
        return row

    # -- appending ------------------------------------------------------------------------------

    def take_offsets(self, topic: str, queue_id: int, count: int) -> int:
        """The first of ``count`` offsets taken in the queue (made if it has no row yet)."""
        row = self.queue_row(topic, queue_id)
        self.put(
            self.s.queues, (topic, queue_id), row._replace(next_offset=row.next_offset + count)
        )
        return row.next_offset

    def append(self, message: PendingMessage) -> None:
        message.queue_offset = self.take_offsets(message.topic, message.queue_id, 1)
        self.store_message(_stored(self.s.next_id("messages"), message))

    def append_all(self, messages: Sequence[PendingMessage]) -> None:
        for message in messages:
            self.append(message)

    def append_batch(self, batch: PlainBatch) -> None:
        batch.first_offset = self.take_offsets(batch.topic, batch.queue_id, len(batch.msg_ids))
        for offset, msg_id, body, encoding in zip(
            itertools.count(batch.first_offset),
            batch.msg_ids,
            batch.bodies,
            batch.encodings,
            strict=False,  # the offsets run on; the three columns are as long as each other
        ):
            message = PendingMessage(
                batch.topic, batch.queue_id, msg_id, body, encoding, batch.born_at, batch.stored_at
            )
            message.queue_offset = offset
            self.store_message(_stored(self.s.next_id("messages"), message))

    def store_message(self, m: StoredMessage) -> None:
        """Insert the row and its index entries (the unique ones refuse a second row)."""
        position = (m.topic, m.queue_id, m.queue_offset)
        if position in self.s.at_position:
            raise ValueError(f"a message is stored at {position} already")
        if m.dedup_key is not None:
            if m.dedup_key in self.s.by_dedup_key:
                raise ValueError(f"dedup key {m.dedup_key!r} is stored already")
            self.put(self.s.by_dedup_key, m.dedup_key, m.id)
        self.put(self.s.messages, m.id, m)
        self.put(self.s.at_position, position, m.id)
        self.add_to(self.s.by_msg_id, m.msg_id, m.id)
        if m.transaction_id is not None:
            self.add_to(self.s.by_transaction, m.transaction_id, m.id)
        if m.keys:
            self.put(self.s.message_keys, position, tuple(dict.fromkeys(m.keys)))

    def delete_message(self, message_id: int) -> StoredMessage | None:
        """Delete the row and its index entries (not its key rows: the caller says)."""
        m = self.drop(self.s.messages, message_id)
        if m is None:
            return None
        self.drop(self.s.at_position, (m.topic, m.queue_id, m.queue_offset))
        self.remove_from(self.s.by_msg_id, m.msg_id, m.id)
        if m.dedup_key is not None:
            self.drop(self.s.by_dedup_key, m.dedup_key)
        if m.transaction_id is not None:
            self.remove_from(self.s.by_transaction, m.transaction_id, m.id)
        return m

    def find_sent(self, dedup_keys: Sequence[str]) -> dict[str, StoredMessage | PendingMessage]:
        found: dict[str, StoredMessage | PendingMessage] = {}
        for key in dedup_keys:
            message_id = self.s.by_dedup_key.get(key)
            if message_id is not None:
                found[key] = self.s.messages[message_id]
        return found

    # -- reading --------------------------------------------------------------------------------

    def get_message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        message_id = self.s.at_position.get((topic, queue_id, offset))
        return None if message_id is None else self.s.messages[message_id]

    def queue_messages(self, topic: str, queue_id: int, start: int = 0) -> Iterator[StoredMessage]:
        """The queue's messages from offset ``start`` on, in offset order (past its holes)."""
        row = self.s.queues.get((topic, queue_id))
        if row is None:
            return
        for offset in range(max(start, row.min_offset), row.next_offset):
            message = self.get_message_at(topic, queue_id, offset)
            if message is not None:
                yield message

    def find_messages(self, msg_id: str) -> list[StoredMessage]:
        return [self.s.messages[i] for i in sorted(self.s.by_msg_id.get(msg_id, ()))]

    def find_messages_of(self, msg_ids: Sequence[str]) -> dict[str, list[StoredMessage]]:
        found: dict[str, list[StoredMessage]] = {}
        for msg_id in dict.fromkeys(msg_ids):
            copies = self.find_messages(msg_id)
            if copies:
                found[msg_id] = copies
        return found

    def query_messages(self, query: MessageQuery) -> list[StoredMessage]:
        found = []
        for m in self.s.messages.values():
            if query.key is not None and query.key not in m.keys:
                continue
            if query.topic is not None:
                if m.topic != query.topic:
                    continue
            elif m.topic.startswith(_SYSTEM):
                continue
            if query.begin is not None and m.stored_at < query.begin:
                continue
            if query.end is not None and m.stored_at > query.end:
                continue
            found.append(m)
        found.sort(key=lambda m: (m.stored_at, m.id))
        return found[: query.limit]

    def real_message_of(
        self, transaction_id: str, topic: str
    ) -> StoredMessage | PendingMessage | None:
        for message_id in sorted(self.s.by_transaction.get(transaction_id, ())):
            message = self.s.messages[message_id]
            if message.topic == topic:
                return message
        return None

    # -- delayed messages -----------------------------------------------------------------------

    def _waiting(self, topic: str) -> list[StoredMessage]:
        return [
            m
            for m in self.s.messages.values()
            if m.topic == topic and m.released_at is None and m.deliver_at is not None
        ]

    def claim_due_delayed(self, topic: str, now: int, limit: int) -> list[StoredMessage]:
        due = [m for m in self._waiting(topic) if m.deliver_at is not None and m.deliver_at <= now]
        due.sort(key=lambda m: (m.deliver_at, m.id))
        return due[:limit]

    def mark_released(self, message_id: int, at: int) -> None:
        message = self.s.messages.get(message_id)
        if message is not None:
            self.put(self.s.messages, message_id, message._replace(released_at=at))

    def next_delayed_at(self, topic: str) -> int | None:
        waiting = [m.deliver_at for m in self._waiting(topic) if m.deliver_at is not None]
        return min(waiting, default=None)


# The columns a pending message brings to its row: all but the id and the release, given after.
_PENDING_COLUMNS = [name for name in StoredMessage._fields if name not in ("id", "released_at")]


def _stored(message_id: int, m: PendingMessage) -> StoredMessage:
    """The row a pending message becomes (its properties copied: the record is not the row)."""
    values = {name: getattr(m, name) for name in _PENDING_COLUMNS}
    values.update(body=bytes(m.body), keys=tuple(m.keys), properties=dict(m.properties))
    return StoredMessage(id=message_id, released_at=None, **values)
