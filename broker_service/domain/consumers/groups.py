"""Consumer groups and their subscriptions: creating them (explicitly, or on a first subscription
with ``auto_create_groups``), where a group starts in a queue (``consume_from``), and the lookup
every receive and ack makes, kept for a second."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from broker_service.domain import names
from broker_service.domain.clock import now_ms
from broker_service.domain.config import ConsumerConfig
from broker_service.domain.consumers.model import (
    ConsumeFrom,
    ConsumerGroup,
    QueueProgress,
    Subscription,
    TagFilter,
    dlq_topic,
    retry_topic,
)
from broker_service.domain.errors import Conflict, InvalidRequest, NotFound
from broker_service.domain.messages.model import QueueInfo, Topic
from broker_service.domain.ports import GroupStore, ProgressStore, StoreTx

_KNOWN_MS = 1000  # how long a group and its subscriptions are trusted without a look


@dataclass(frozen=True, slots=True)
class GroupCreated:
    group: ConsumerGroup
    created: bool


@dataclass(frozen=True, slots=True)
class Subscribed:
    subscription: Subscription
    created: bool


def get_group(tx: GroupStore, name: str) -> ConsumerGroup:
    group = tx.get_consumer_group(name)
    if group is None:
        raise NotFound(
            f"consumer group {name!r} does not exist",
            code="CONSUMER_GROUP_NOT_FOUND",
            group=name,
        )
    return group


def start_offset(tx: ProgressStore, group: ConsumerGroup, info: QueueInfo) -> int:
    """Where a group (or a new broadcasting member) starts in a queue: ``consume_from``."""
    if info.topic == retry_topic(group.name) or group.consume_from is ConsumeFrom.FIRST_OFFSET:
        return info.min_offset
    if group.consume_from is ConsumeFrom.TIMESTAMP and group.consume_timestamp is not None:
        found = tx.first_offset_since(info.topic, info.queue_id, group.consume_timestamp)
        return info.max_offset if found is None else max(found, info.min_offset)
    return info.max_offset


class Groups:
    def __init__(self, config: ConsumerConfig, clock: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.clock = clock
        # Groups and subscriptions change rarely and every receive and ack needs them: kept for
        # a second (changes made through this broker are seen at once).
        self._known: dict[str, tuple[int, ConsumerGroup, list[Subscription]]] = {}

    def group_of(
        self, tx: GroupStore, name: str, topic: str | None = None
    ) -> tuple[ConsumerGroup, list[Subscription]]:
        now = self.clock()
        known = self._known.get(name)
        if known is not None and known[0] > now:
            _, group, subscriptions = known
            if topic is None or any(s.topic == topic for s in subscriptions):
                return group, subscriptions
        group = get_group(tx, name)
        subscriptions = tx.list_subscriptions(group.name)
        if len(self._known) > 10_000:
            self._known.clear()
        self._known[name] = (now + _KNOWN_MS, group, subscriptions)
        return group, subscriptions

    def max_reconsume_times(self, group: ConsumerGroup) -> int:
        if group.max_reconsume_times is not None:
            return group.max_reconsume_times
        return self.config.max_reconsume_times

    # -- units of work ----------------------------------------------------------------------------

    def create_group(self, wanted: ConsumerGroup) -> Callable[[StoreTx], GroupCreated]:
        names.check_name(wanted.name, "consumer group")
        if wanted.consume_from is ConsumeFrom.TIMESTAMP and wanted.consume_timestamp is None:
            raise InvalidRequest(
                "consume_from TIMESTAMP needs consume_timestamp", code="INVALID_CONSUME_FROM"
            )
        if wanted.max_reconsume_times is not None and wanted.max_reconsume_times < 0:
            raise InvalidRequest(
                "max_reconsume_times must be 0 or more", code="INVALID_MAX_RECONSUME_TIMES"
            )

        def unit(tx: StoreTx) -> GroupCreated:
            self._known.pop(wanted.name, None)
            existing = tx.get_consumer_group(wanted.name)
            if existing is not None:
                if not existing.same_config(wanted):
                    raise Conflict(
                        f"consumer group {wanted.name!r} exists with another configuration",
                        code="CONSUMER_GROUP_EXISTS",
                        group=wanted.name,
                    )
                return GroupCreated(existing, created=False)
            group = self._insert_group(tx, wanted)
            return GroupCreated(group, created=True)

        return unit

    def _insert_group(self, tx: StoreTx, wanted: ConsumerGroup) -> ConsumerGroup:
        now = self.clock()
        group = replace(wanted, created_at=now)
        tx.create_consumer_group(group)
        for name in (retry_topic(group.name), dlq_topic(group.name)):
            if tx.get_topic(name) is None:
                tx.create_topic(Topic(name, 1, False, 6, True, now))
        return group

    def subscribe(
        self, group_name: str, topic_name: str, expression: str
    ) -> Callable[[StoreTx], Subscribed]:
        names.check_name(group_name, "consumer group")
        names.check_user_topic(topic_name)
        tag_filter = TagFilter.parse(expression)

        def unit(tx: StoreTx) -> Subscribed:
            self._known.pop(group_name, None)
            group = tx.get_consumer_group(group_name)
            if group is None:
                if not self.config.auto_create_groups:
                    get_group(tx, group_name)  # raises CONSUMER_GROUP_NOT_FOUND
                group = self._insert_group(tx, ConsumerGroup(group_name))
            if tx.get_topic(topic_name) is None:
                raise NotFound(
                    f"topic {topic_name!r} does not exist",
                    code="TOPIC_NOT_FOUND",
                    topic=topic_name,
                )
            now = self.clock()
            current = {s.topic: s for s in tx.list_subscriptions(group.name)}.get(topic_name)
            subscription = Subscription(group.name, topic_name, tag_filter.expression, now)
            if current is not None and current.expression == subscription.expression:
                return Subscribed(current, created=False)
            tx.put_subscription(subscription)
            if current is None and not group.broadcasting:
                # The group starts in the topic now, where consume_from says.
                tx.init_progress(
                    [
                        QueueProgress(group.name, topic_name, q.queue_id, "", at, at)
                        for q in tx.queue_infos(topic_name)
                        for at in [start_offset(tx, group, q)]
                    ],
                    now,
                )
            return Subscribed(subscription, created=current is None)

        return unit
