"""An operator's view of a consumer group, and resetting its offsets by time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from broker_service.domain import names
from broker_service.domain.consumers.backlog import queue_lag
from broker_service.domain.consumers.groups import Groups, get_group, start_offset
from broker_service.domain.consumers.model import (
    PROP_ORIGIN_QUEUE_ID,
    PROP_RETRY_TOPIC,
    GroupView,
    QueueProgress,
    QueueView,
    dlq_topic,
    retry_topic,
)
from broker_service.domain.errors import NotFound
from broker_service.domain.messages.model import StoredMessage
from broker_service.domain.ports import StoreTx
from broker_service.domain.ports.consumers import GroupQueueProgress

_DEAD_COUNT_MAX = 100_000


@dataclass(frozen=True, slots=True)
class OffsetReset:
    topic: str
    offsets: dict[int, int]  # queue -> the offset the group consumes from now on


def _origin(message: StoredMessage) -> tuple[str, int]:
    topic = message.properties.get(PROP_RETRY_TOPIC, message.topic)
    return topic, int(message.properties.get(PROP_ORIGIN_QUEUE_ID, message.queue_id))


@dataclass(eq=False)
class ConsumerAdmin:
    groups: Groups

    def reset_offset(
        self, group_name: str, topic: str, timestamp: int
    ) -> Callable[[StoreTx], OffsetReset]:
        """Consume ``topic`` again from the first message stored at or after ``timestamp`` (RocketMQ's
        resetOffsetByTime).  Open deliveries of the topic end: their acks become stale."""
        names.check_name(group_name, "consumer group")
        names.check_user_topic(topic)

        def unit(tx: StoreTx) -> OffsetReset:
            group = get_group(tx, group_name)
            if topic not in {s.topic for s in tx.list_subscriptions(group.name)}:
                raise NotFound(
                    f"consumer group {group.name!r} does not subscribe to {topic!r}",
                    code="SUBSCRIPTION_NOT_FOUND",
                    group=group.name,
                    topic=topic,
                )
            now = self.groups.clock()
            clients = {p.client_id for p in tx.list_progress(group.name) if p.topic == topic}
            if not group.broadcasting:
                clients.add("")
            offsets: dict[int, int] = {}
            for info in tx.queue_infos(topic):
                found = tx.first_offset_since(topic, info.queue_id, timestamp)
                offset = info.max_offset if found is None else max(found, info.min_offset)
                offsets[info.queue_id] = offset
                tx.expire_queue_deliveries(group.name, topic, info.queue_id, now)
                rows = [
                    QueueProgress(group.name, topic, info.queue_id, c, offset, offset)
                    for c in sorted(clients)
                ]
                tx.init_progress(rows, now)
                for row in rows:
                    tx.save_progress(row, now)
            tx.add_trace(f"{group.name}/{topic}", "RESET_OFFSET", "operator", now, str(timestamp))
            return OffsetReset(topic, offsets)

        return unit

    def view(self, group_name: str) -> Callable[[StoreTx], GroupView]:
        names.check_name(group_name, "consumer group")

        def unit(tx: StoreTx) -> GroupView:
            group = get_group(tx, group_name)
            now = self.groups.clock()
            subscriptions = tx.list_subscriptions(group.name)
            progress = {(p.topic, p.queue_id, p.client_id): p for p in tx.list_progress(group.name)}
            open_counts: dict[tuple[str, int, str], list[int]] = {}
            for (topic, queue_id, member), counts in tx.open_delivery_counts(
                group.name, now
            ).items():
                slot = open_counts.setdefault(
                    (topic, queue_id, member if group.broadcasting else ""), [0, 0]
                )
                slot[0] += counts[0]
                slot[1] += counts[1]
            waiting = Counter(_origin(m) for m in tx.waiting_retries(retry_topic(group.name)))
            dead = Counter(
                _origin(m)
                for m in tx.topic_messages(dlq_topic(group.name), _DEAD_COUNT_MAX)
                if m.released_at is None
            )
            members = tx.list_consumers(group.name)
            seen = {m.client_id: m.last_seen_at for m in members} if group.broadcasting else {}
            live_since = now - self.groups.config.consumer_expiry_ms
            topics = [s.topic for s in subscriptions] + [retry_topic(group.name)]
            queues: list[QueueView] = []
            lag = retry_lag = 0
            # The total counts what the subscribed topics' rows count as retrying -- their
            # deliveries waiting to be handed out again (each once, whichever member's row) and
            # the retry copies waiting for their delay -- plus the retry topic's lag (the copies
            # released there, not yet consumed; its own rows' waiting deliveries are inside it).
            again = sum(
                counts[1]
                for (topic, _q, _c), counts in open_counts.items()
                if topic in {s.topic for s in subscriptions}
            )
            for topic in topics:
                infos = tx.queue_infos(topic)
                clients = sorted({c for (t, _q, c) in progress if t == topic}) or [""]
                for info in infos:
                    here = [(c, progress.get((topic, info.queue_id, c))) for c in clients]
                    rows = [
                        GroupQueueProgress(
                            group.name,
                            group.broadcasting,
                            topic,
                            info.queue_id,
                            info.max_offset,
                            client,
                            None if current is None else current.committed_offset,
                            seen.get(client),
                        )
                        for client, current in here
                    ]
                    # Where a receive would start it: read once, where a row has no offset yet
                    # (and so never None below).
                    start = None
                    if any(r.committed_offset is None for r in rows):
                        start = start_offset(tx, group, info)
                    for row, (client, current) in zip(rows, here, strict=True):
                        in_flight, retrying = open_counts.get(
                            (topic, info.queue_id, client), [0, 0]
                        )
                        queues.append(
                            QueueView(
                                topic=topic,
                                queue_id=info.queue_id,
                                client_id=client,
                                committed_offset=row.committed_offset,
                                max_offset=info.max_offset,
                                lag=queue_lag([row], live_since, start) or 0,
                                in_flight=in_flight,
                                retrying=retrying + waiting[(topic, info.queue_id)],
                                dead=dead[(topic, info.queue_id)],
                                expired=0 if current is None else current.expired,
                            )
                        )
                    messages = queue_lag(rows, live_since, start) or 0
                    if topic == retry_topic(group.name):
                        retry_lag += messages
                    else:
                        lag += messages
            return GroupView(
                group=group,
                subscriptions=subscriptions,
                members=members,
                live_since=live_since,
                queues=queues,
                retrying=again + sum(waiting.values()) + retry_lag,
                dead=sum(dead.values()),
                lag=lag,
                retry_lag=retry_lag,
            )

        return unit
