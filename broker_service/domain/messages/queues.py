"""Choosing a queue for a message: explicit queue id, sharding key, or round-robin."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator

from broker_service.domain.errors import InvalidRequest
from broker_service.domain.messages.model import MessageDraft, Topic


def queue_for_sharding_key(sharding_key: str, queues: int) -> int:
    """Every message of one sharding key goes to one queue (a stable hash, same on every broker)."""
    return zlib.crc32(sharding_key.encode("utf-8")) % queues


class QueueSelector:
    """Round-robins over a topic's queues, as RocketMQ's default producer does: one queue per send,
    so the messages of a batch that name no queue and no sharding key share one queue, in order
    (RocketMQ stores a ``MessageBatch`` in one queue too)."""

    def __init__(self) -> None:
        self._counters: dict[str, Iterator[int]] = {}

    def select(self, topic: Topic, draft: MessageDraft, next_queue: int | None = None) -> int:
        """The draft's queue: its ``queue_id``, its sharding key's queue, else ``next_queue`` (the
        send's round-robin pick), else the next in the round."""
        if draft.queue_id is not None:
            if not 0 <= draft.queue_id < topic.queues:
                raise InvalidRequest(
                    f"queue_id {draft.queue_id} is out of range: topic {topic.name!r} has "
                    f"queues 0-{topic.queues - 1}",
                    code="INVALID_QUEUE_ID",
                    topic=topic.name,
                )
            return draft.queue_id
        if draft.sharding_key is not None:
            return queue_for_sharding_key(draft.sharding_key, topic.queues)
        if next_queue is not None:
            return next_queue
        return self.next_queue(topic)

    def next_queue(self, topic: Topic) -> int:
        counter = self._counters.get(topic.name)
        if counter is None:
            counter = self._counters[topic.name] = itertools.count()
        return next(counter) % topic.queues
