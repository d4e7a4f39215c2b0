"""Consumer groups: subscriptions, receive, ack and change-invisible (RocketMQ 5's SimpleConsumer).

* A **group** consumes its subscribed topics plus its own ``%RETRY%{group}``.  Clustering: the group
  has one progress per queue and a message is in flight at one member at a time.  Broadcasting:
  every member (``client_id``) has its own progress and gets every message.
* **receive** first hands out again what is due -- a delivery whose invisibility ran out (with
  ``reconsume_times + 1``), an orderly retry whose time came -- then new messages from each queue's
  pull offset, skipping those the tag expression filters out.  Each hand-out is a row of
  ``deliveries``: the lease behind the receipt handle.
* **ack** ends in-flight deliveries still inside their invisibility; a stale handle acks nothing.
* A queue's **committed offset** is its oldest open delivery's offset, else its pull offset: it never
  passes an unacked message, so a crash redelivers and never loses.
* **Orderly** groups hand out at most one message per queue at a time, and nothing newer of a queue
  while an older one is open (in flight or waiting for its retry).

Retry, dead letters and operator actions are in :mod:`broker_service.domain.consumer_retry`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from broker_service.domain import names
from broker_service.domain.clock import now_ms
from broker_service.domain.consumer_copies import dead_letter
from broker_service.domain.consumer_model import (
    PROP_RETRY_TOPIC,
    AckResult,
    ConsumeFrom,
    ConsumerGroup,
    Delivered,
    Delivery,
    DeliveryState,
    MessageModel,
    NewDelivery,
    QueueProgress,
    Subscription,
    TagFilter,
    dlq_topic,
    retry_topic,
)
from broker_service.domain.errors import Conflict, InvalidRequest, NotFound
from broker_service.domain.ids import new_id
from broker_service.domain.model import QueueInfo, StoredMessage, Topic
from broker_service.domain.ports import StoreTx

ProgressKey = tuple[str, str, int, str]
_SCAN_CHUNK = 256
_SCAN_MAX = 4096
# How long a receive trusts that no delivery falls due without looking again (see lease_ends).
_DUE_RECHECK_MS = 200
_KNOWN_MS = 1000  # most messages one receive looks at in one queue (tag filters skip the rest)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    auto_create_groups: bool = True
    max_reconsume_times: int = 16
    delay_levels_ms: tuple[int, ...] = (1000, 5000, 10_000, 30_000)
    consumer_expiry_ms: int = 120_000
    broker_id: str = "broker"


@dataclass(frozen=True, slots=True)
class GroupCreated:
    group: ConsumerGroup
    created: bool


@dataclass(frozen=True, slots=True)
class Subscribed:
    subscription: Subscription
    created: bool


@dataclass(slots=True)
class ReceiveResult:
    delivered: list[Delivered]
    topics: list[str]
    next_due_at: int | None = None
    # Who competes with this receive for its messages: the group, or the member of a
    # broadcasting group (long-poll wake-ups go to one receive per competitor).
    competitor: str = ""


@dataclass(slots=True)
class _Claim:
    """What one receive has taken so far."""

    group: ConsumerGroup
    client_key: str  # whose progress: the member (broadcasting) or '' (the group)
    member: str  # who receives
    named_topic: str | None
    budget: int
    now: int
    invisible_until: int
    delivered: list[Delivered] = field(default_factory=list)
    new: list[NewDelivery] = field(default_factory=list)
    moved: set[ProgressKey] = field(default_factory=set)
    next_due: int | None = None  # the store's next due time, when this receive asked for it
    asked_next_due: bool = False

    @property
    def left(self) -> int:
        return self.budget - len(self.delivered)


def shown_topic(message: StoredMessage) -> str:
    """The topic a consumer sees: a retry copy's original topic (RocketMQ's RETRY_TOPIC)."""
    return message.properties.get(PROP_RETRY_TOPIC, message.topic)


def get_group(tx: StoreTx, name: str) -> ConsumerGroup:
    group = tx.get_consumer_group(name)
    if group is None:
        raise NotFound(
            f"consumer group {name!r} does not exist",
            code="CONSUMER_GROUP_NOT_FOUND",
            group=name,
        )
    return group


def start_offset(tx: StoreTx, group: ConsumerGroup, info: QueueInfo) -> int:
    """Where a group (or a new broadcasting member) starts in a queue: ``consume_from``."""
    if info.topic == retry_topic(group.name) or group.consume_from is ConsumeFrom.FIRST_OFFSET:
        return info.min_offset
    if group.consume_from is ConsumeFrom.TIMESTAMP and group.consume_timestamp is not None:
        found = tx.first_offset_since(info.topic, info.queue_id, group.consume_timestamp)
        return info.max_offset if found is None else max(found, info.min_offset)
    return info.max_offset


class Consumers:
    def __init__(self, config: ConsumerConfig, clock: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.clock = clock
        self._turn = itertools.count()
        # Groups and subscriptions change rarely and every receive and ack needs them: kept for
        # a second (changes made through this broker are seen at once).
        self._known: dict[str, tuple[int, ConsumerGroup, list[Subscription]]] = {}
        # Members whose progress rows all exist (PostgreSQL: a receive then locks them at once).
        self._complete: set[tuple[str, str, tuple[str, ...]]] = set()
        # Per group: the time before which none of its open deliveries falls due, as far as this
        # broker knows.  Learnt when a look for due deliveries found none (the store's next due
        # time, at most _DUE_RECHECK_MS ahead), lowered by every lease this broker hands out or
        # moves; until then a receive skips the look (a round trip).  A lease another broker
        # sharing the store hands out is seen at the next look, at most _DUE_RECHECK_MS later.
        self._quiet_until: dict[str, int] = {}

    def lease_ends(self, group: str, at: int) -> None:
        """A delivery of ``group`` falls due at ``at`` (a lease handed out, changed, retried)."""
        if at < self._quiet_until.get(group, at):
            self._quiet_until[group] = at

    def group_of(
        self, tx: StoreTx, name: str, topic: str | None = None
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

    # -- groups and subscriptions ---------------------------------------------------------------

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
        group = ConsumerGroup(
            name=wanted.name,
            message_model=wanted.message_model,
            consume_from=wanted.consume_from,
            consume_timestamp=wanted.consume_timestamp,
            max_reconsume_times=wanted.max_reconsume_times,
            orderly=wanted.orderly,
            created_at=now,
        )
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

    # -- receive --------------------------------------------------------------------------------

    def receive(
        self,
        group_name: str,
        client_id: str,
        topic_name: str | None,
        max_messages: int,
        invisible_ms: int,
        touch: bool = True,
    ) -> Callable[[StoreTx], ReceiveResult]:
        names.check_name(group_name, "consumer group")
        if topic_name is not None:
            names.check_user_topic(topic_name)

        def unit(tx: StoreTx) -> ReceiveResult:
            group, subscriptions = self.group_of(tx, group_name, topic_name)
            if topic_name is not None:
                subscriptions = [s for s in subscriptions if s.topic == topic_name]
                if not subscriptions:
                    raise NotFound(
                        f"consumer group {group.name!r} does not subscribe to {topic_name!r}",
                        code="SUBSCRIPTION_NOT_FOUND",
                        group=group.name,
                        topic=topic_name,
                    )
            now = self.clock()
            if touch:
                tx.touch_consumer(group.name, client_id, now)
            claim = _Claim(
                group=group,
                client_key=client_id if group.broadcasting else "",
                member=client_id,
                named_topic=topic_name,
                budget=max_messages,
                now=now,
                invisible_until=now + invisible_ms,
            )
            self._redeliver_due(tx, claim)
            tx.add_deliveries(claim.new)  # before new ones: an orderly queue sees them open
            claim.new = []
            sources = {s.topic: s.filter for s in subscriptions}
            sources[retry_topic(group.name)] = TagFilter("*", None)
            if claim.left > 0:
                self._claim_new(tx, claim, sources)
            tx.add_deliveries(claim.new)
            tx.advance_committed(sorted(claim.moved), now)
            if claim.delivered:
                self.lease_ends(group.name, claim.invisible_until)
                next_due = None
            elif claim.asked_next_due:
                next_due = claim.next_due
            else:
                next_due = tx.next_due_at(group.name)
            competitor = f"{group.name}\x00{client_id}" if group.broadcasting else group.name
            return ReceiveResult(claim.delivered, list(sources), next_due, competitor)

        return unit

    def _redeliver_due(self, tx: StoreTx, claim: _Claim) -> None:
        group = claim.group
        quiet = self._quiet_until.get(group.name, 0)
        if claim.now < quiet <= claim.now + _DUE_RECHECK_MS:  # (a clock set back: look)
            return
        client = claim.client_key if group.broadcasting else None
        due_now = tx.claim_due_deliveries(group.name, client, claim.now, claim.budget)
        if not due_now:
            claim.next_due, claim.asked_next_due = tx.next_due_at(group.name), True
            horizon = claim.now + _DUE_RECHECK_MS
            quiet = horizon if claim.next_due is None else min(claim.next_due, horizon)
            self._quiet_until[group.name] = quiet
            return
        for due in due_now:
            if claim.left <= 0:
                break
            message = tx.get_message_at(due.topic, due.queue_id, due.queue_offset)
            key = (group.name, due.topic, due.queue_id, claim.client_key)
            if message is None:  # purged meanwhile: nothing left to deliver
                tx.set_delivery(due, state=DeliveryState.EXPIRED, finished_at=claim.now)
                claim.moved.add(key)
                continue
            if claim.named_topic is not None and shown_topic(message) != claim.named_topic:
                continue
            times = due.reconsume_times + 1
            if times > self.max_reconsume_times(group):
                if tx.set_delivery(due, state=DeliveryState.DEAD, finished_at=claim.now):
                    dead_letter(tx, group, message, times, claim.now, self.config.broker_id)
                    claim.moved.add(key)
                continue
            if not tx.set_delivery(due, state=DeliveryState.EXPIRED, finished_at=claim.now):
                continue
            self._hand_out(claim, message, times)
            claim.moved.add(key)

    def _claim_new(self, tx: StoreTx, claim: _Claim, sources: dict[str, TagFilter]) -> None:
        """New messages from the pull offsets on.  Progress rows a group (or member) lacks are
        made first, where ``consume_from`` says; then only the queues with something new are read
        -- on PostgreSQL locked (``SKIP LOCKED``) so that another broker takes the others."""
        group = claim.group
        member = (group.name, claim.client_key, tuple(sources))
        pairs: list[tuple[QueueInfo, QueueProgress]] = []
        if not tx.claims_need_locks or member not in self._complete:
            overview = tx.progress_overview(group.name, list(sources), claim.client_key)
            fresh = [
                QueueProgress(group.name, info.topic, info.queue_id, claim.client_key, at, at)
                for info, progress in overview
                if progress is None
                for at in [start_offset(tx, group, info)]
            ]
            tx.init_progress(fresh, claim.now)
            if not fresh and len(self._complete) < 100_000:
                self._complete.add(member)  # every row exists (committed): skip this look
            made = {(p.topic, p.queue_id): p for p in fresh}
            pairs = [
                (info, progress or made[(info.topic, info.queue_id)]) for info, progress in overview
            ]
        if tx.claims_need_locks:
            # Another broker may move these rows: lock the ones it does not hold, as they are now.
            pairs = tx.lock_candidates(group.name, list(sources), claim.client_key)
        candidates = [(i, p) for i, p in pairs if p.pulled_offset < i.max_offset]
        if not candidates:
            return
        turn = next(self._turn) % len(candidates)
        moved: list[QueueProgress] = []
        for info, current in candidates[turn:] + candidates[:turn]:
            if claim.left <= 0:
                break
            topic, queue_id = info.topic, info.queue_id
            if group.orderly and (
                tx.oldest_open_offset(group.name, topic, queue_id, claim.client_key) is not None
            ):
                continue
            want = 1 if group.orderly else claim.left
            taken, pulled = self._scan(tx, claim, current, info, sources[topic], want)
            if pulled == current.pulled_offset:
                continue
            for message in taken:
                self._hand_out(claim, message, message.reconsume_times)
            committed = current.committed_offset
            if committed >= current.pulled_offset:
                # Nothing of the queue was open: the committed offset is the first new open
                # offset, or the new pull offset when the tag filter took nothing.
                committed = taken[0].queue_offset if taken else pulled
            moved.append(
                QueueProgress(group.name, topic, queue_id, claim.client_key, committed, pulled)
            )
        tx.save_progress(moved, claim.now)

    def _scan(
        self,
        tx: StoreTx,
        claim: _Claim,
        progress: QueueProgress,
        info: QueueInfo,
        tag_filter: TagFilter,
        want: int,
    ) -> tuple[list[StoredMessage], int]:
        """Messages to hand out from the pull offset on, and the pull offset after them."""
        taken: list[StoredMessage] = []
        offset = max(progress.pulled_offset, info.min_offset)
        scanned = 0
        while len(taken) < want and offset < info.max_offset and scanned < _SCAN_MAX:
            chunk = min(_SCAN_CHUNK, max(want - len(taken), 16))
            batch = tx.messages_from(info.topic, info.queue_id, offset, chunk)
            if not batch:
                break
            for message in batch:
                if message.queue_offset >= info.max_offset:
                    return taken, offset
                if claim.named_topic is not None and shown_topic(message) != claim.named_topic:
                    # A retry copy of another topic: it waits for a receive of its own topic.
                    return taken, offset
                scanned += 1
                offset = message.queue_offset + 1
                if tag_filter.matches(message.tags):
                    taken.append(message)
                    if len(taken) >= want:
                        return taken, offset
        return taken, offset

    def _hand_out(self, claim: _Claim, message: StoredMessage, reconsume_times: int) -> None:
        handle = new_id()
        claim.new.append(
            NewDelivery(
                consumer_group=claim.group.name,
                client_id=claim.member,
                topic=message.topic,
                queue_id=message.queue_id,
                queue_offset=message.queue_offset,
                msg_id=message.msg_id,
                receipt_handle=handle,
                reconsume_times=reconsume_times,
                delivered_at=claim.now,
                invisible_until=claim.invisible_until,
            )
        )
        claim.delivered.append(
            Delivered(message, shown_topic(message), handle, reconsume_times, claim.invisible_until)
        )

    # -- ack and change-invisible ---------------------------------------------------------------

    def ack(self, group_name: str, handles: Sequence[str]) -> Callable[[StoreTx], AckResult]:
        names.check_name(group_name, "consumer group")
        wanted = list(dict.fromkeys(handles))

        def unit(tx: StoreTx) -> AckResult:
            group, _ = self.group_of(tx, group_name)
            now = self.clock()
            done = tx.finish_deliveries(group.name, wanted, DeliveryState.ACKED, now)
            tx.advance_committed([progress_key(group, x) for x in done], now)
            acked = {x.receipt_handle for x in done}
            freed = tuple({x.topic for x in done}) if group.orderly else ()
            return AckResult(len(acked), [h for h in wanted if h not in acked], freed)

        return unit

    def change_invisible(
        self, group_name: str, handle: str, invisible_ms: int
    ) -> Callable[[StoreTx], Delivery]:
        names.check_name(group_name, "consumer group")

        def unit(tx: StoreTx) -> Delivery:
            group = get_group(tx, group_name)
            now = self.clock()
            delivery = live_delivery(tx, group, handle, now)
            renewed = new_id()
            until = now + invisible_ms
            self.lease_ends(group.name, until)
            if not tx.set_delivery(
                delivery,
                state=DeliveryState.INFLIGHT,
                receipt_handle=renewed,
                invisible_until=until,
            ):
                raise stale(handle)
            return Delivery(
                id=delivery.id,
                consumer_group=delivery.consumer_group,
                client_id=delivery.client_id,
                topic=delivery.topic,
                queue_id=delivery.queue_id,
                queue_offset=delivery.queue_offset,
                msg_id=delivery.msg_id,
                receipt_handle=renewed,
                state=DeliveryState.INFLIGHT,
                reconsume_times=delivery.reconsume_times,
                delivered_at=delivery.delivered_at,
                invisible_until=until,
            )

        return unit


def progress_key(group: ConsumerGroup, delivery: Delivery) -> ProgressKey:
    """The progress a delivery holds back: its member's (broadcasting) or the group's."""
    client = delivery.client_id if group.broadcasting else ""
    return (group.name, delivery.topic, delivery.queue_id, client)


def stale(handle: str) -> Conflict:
    return Conflict(
        "the receipt handle is stale: its invisibility ran out (or it was acked, nacked or "
        "renewed); the message comes again",
        code="RECEIPT_HANDLE_EXPIRED",
        receipt_handle=handle,
    )


def live_delivery(tx: StoreTx, group: ConsumerGroup, handle: str, now: int) -> Delivery:
    """The in-flight delivery behind a handle, still inside its invisibility."""
    delivery = tx.get_delivery(group.name, handle)
    if delivery is None:
        raise NotFound(
            f"receipt handle {handle!r} is unknown in consumer group {group.name!r}",
            code="RECEIPT_HANDLE_NOT_FOUND",
            receipt_handle=handle,
        )
    if delivery.state is not DeliveryState.INFLIGHT or delivery.invisible_until <= now:
        raise stale(handle)
    return delivery


__all__ = [
    "ConsumerConfig",
    "Consumers",
    "GroupCreated",
    "MessageModel",
    "ReceiveResult",
    "Subscribed",
    "get_group",
    "live_delivery",
    "shown_topic",
    "start_offset",
]
