"""The consumer-group parts of ``MemoryTx``: groups with their subscriptions and members, and each
queue's progress.  A queue's committed offset is its oldest open delivery's offset, else its pull
offset, as in the SQL store; units run one at a time, so no claim needs a lock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker_service.domain.consumers.model import (
    ConsumerGroup,
    Member,
    QueueProgress,
    Subscription,
)
from broker_service.domain.messages.model import QueueInfo, StoredMessage
from broker_service.domain.names import DLQ_PREFIX, RETRY_PREFIX
from broker_service.domain.ports.consumers import GroupQueueProgress
from broker_service.memstore.deliveries import DeliveryPart
from broker_service.memstore.state import Progress, ProgressKey


class GroupPart(DeliveryPart):
    def get_consumer_group(self, name: str) -> ConsumerGroup | None:
        return self.s.groups.get(name)

    def create_consumer_group(self, group: ConsumerGroup) -> bool:
        """Insert the group; False if it exists already."""
        if group.name in self.s.groups:
            return False
        self.put(self.s.groups, group.name, group)
        return True

    def delete_consumer_group(self, group: str) -> None:
        tables: tuple[dict[Any, Any], ...] = (
            self.s.subscriptions,
            self.s.members,
            self.s.progress,
        )
        for table in tables:
            for key in [key for key in table if key[0] == group]:
                self.drop(table, key)
        self.drop(self.s.groups, group)

    def list_subscriptions(self, group: str) -> list[Subscription]:
        return [s for (g, _), s in sorted(self.s.subscriptions.items()) if g == group]

    def put_subscription(self, subscription: Subscription) -> None:
        key = (subscription.consumer_group, subscription.topic)
        known = self.s.subscriptions.get(key)
        if known is not None:  # the expression changes; the subscription keeps its time
            subscription = Subscription(
                known.consumer_group, known.topic, subscription.expression, known.created_at
            )
        self.put(self.s.subscriptions, key, subscription)

    def touch_consumer(self, group: str, client_id: str, at: int) -> None:
        self.put(self.s.members, (group, client_id), Member(group, client_id, at))

    def list_consumers(self, group: str) -> list[Member]:
        return [m for (g, _), m in sorted(self.s.members.items()) if g == group]

    def all_groups_progress(self) -> list[GroupQueueProgress]:
        """Each group's topics (its subscriptions and its retry topic), their queues, and the
        group's progress rows in them with the members those rows belong to."""
        read: list[tuple[str, str]] = [key for key in self.s.subscriptions]
        read += [(name, RETRY_PREFIX + name) for name in self.s.groups]
        rows: dict[tuple[str, str, int], list[tuple[str, Progress]]] = {}
        for (name, topic, queue_id, client_id), p in sorted(self.s.progress.items()):
            rows.setdefault((name, topic, queue_id), []).append((client_id, p))
        found: list[GroupQueueProgress] = []
        for name, topic in sorted(read):
            group = self.s.groups.get(name)
            if group is None:
                continue
            for info in self.queue_infos(topic):
                row = (name, group.broadcasting, topic, info.queue_id, info.max_offset)
                here = rows.get((name, topic, info.queue_id))
                if not here:
                    found.append(GroupQueueProgress(*row, None, None, None))
                for client_id, p in here or ():
                    member = self.s.members.get((name, client_id))
                    seen = None if member is None else member.last_seen_at
                    found.append(GroupQueueProgress(*row, client_id, p.committed_offset, seen))
        return found

    def dead_letter_counts(self) -> dict[str, int]:
        """Every group's messages in its DLQ not yet resent (0 for none)."""
        counts = dict.fromkeys(self.s.groups, 0)
        for m in self.s.messages.values():
            if m.topic.startswith(DLQ_PREFIX) and m.released_at is None:
                name = m.topic.removeprefix(DLQ_PREFIX)
                if name in counts:
                    counts[name] += 1
        return counts


class ProgressPart(GroupPart):
    @property
    def claims_need_locks(self) -> bool:
        """Units run one at a time: no other unit claims beside this one."""
        return False

    def init_progress(self, progress: Sequence[QueueProgress], at: int) -> None:
        for p in progress:
            key = (p.consumer_group, p.topic, p.queue_id, p.client_id)
            if key not in self.s.progress:
                self.put(self.s.progress, key, Progress(p.committed_offset, p.pulled_offset, at))

    def save_progress(self, progress: QueueProgress | Sequence[QueueProgress], at: int) -> None:
        many = [progress] if isinstance(progress, QueueProgress) else list(progress)
        for p in many:
            key = (p.consumer_group, p.topic, p.queue_id, p.client_id)
            known = self.s.progress.get(key)
            if known is not None:
                moved = known._replace(
                    committed_offset=p.committed_offset,
                    pulled_offset=p.pulled_offset,
                    updated_at=at,
                )
                self.put(self.s.progress, key, moved)

    def progress_overview(
        self, group: str, topics: Sequence[str], client_id: str
    ) -> list[tuple[QueueInfo, QueueProgress | None]]:
        """Every queue of the (existing) ``topics`` with the group's progress in it."""
        found: list[tuple[QueueInfo, QueueProgress | None]] = []
        for topic in sorted(set(topics)):
            if topic not in self.s.topics:
                continue
            for info in self.queue_infos(topic):
                p = self.s.progress.get((group, topic, info.queue_id, client_id))
                progress = None
                if p is not None:
                    progress = QueueProgress(
                        group, topic, info.queue_id, client_id, p.committed_offset, p.pulled_offset
                    )
                found.append((info, progress))
        return found

    def lock_candidates(
        self, group: str, topics: Sequence[str], client_id: str
    ) -> list[tuple[QueueInfo, QueueProgress]]:
        """The group's queues of ``topics`` with something new, as they are now (nothing to lock:
        units run one at a time)."""
        found: list[tuple[QueueInfo, QueueProgress]] = []
        for info, progress in self.progress_overview(group, topics, client_id):
            if progress is not None and progress.pulled_offset < info.max_offset:
                found.append((info, progress))
        return found

    def advance_committed(self, keys: Sequence[ProgressKey], at: int) -> None:
        """Move the committed offset of each (group, topic, queue, client) to its oldest open
        offset, else its pull offset."""
        for key in sorted(set(keys)):
            known = self.s.progress.get(key)
            if known is None:
                continue
            oldest = self.oldest_open_offset(*key)
            committed = known.pulled_offset if oldest is None else oldest
            self.put(
                self.s.progress, key, known._replace(committed_offset=committed, updated_at=at)
            )

    def list_progress(self, group: str) -> list[QueueProgress]:
        return [
            QueueProgress(
                g, topic, queue_id, client, p.committed_offset, p.pulled_offset, p.expired
            )
            for (g, topic, queue_id, client), p in sorted(self.s.progress.items())
            if g == group
        ]

    def oldest_open_offset(
        self, group: str, topic: str, queue_id: int, client_id: str
    ) -> int | None:
        """Client '' is the group's progress (clustering): every member's deliveries hold it."""
        return min(
            (
                d.queue_offset
                for d in self.open_of(group)
                if (d.topic, d.queue_id) == (topic, queue_id)
                and (client_id == "" or d.client_id == client_id)
            ),
            default=None,
        )

    def first_offset_since(self, topic: str, queue_id: int, at: int) -> int | None:
        since = (m.queue_offset for m in self.queue_messages(topic, queue_id) if m.stored_at >= at)
        return min(since, default=None)

    def messages_from(
        self, topic: str, queue_id: int, offset: int, limit: int
    ) -> list[StoredMessage]:
        found: list[StoredMessage] = []
        for message in self.queue_messages(topic, queue_id, offset):
            if len(found) >= limit:
                break
            found.append(message)
        return found
