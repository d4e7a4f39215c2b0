"""Receive: handing out messages to the members of a consumer group (RocketMQ 5's SimpleConsumer).

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
* **Orderly** groups hand out one message per queue at a time -- or, for a batch consumer, up to
  ``max_per_queue`` consecutive ones at once -- and nothing newer of a queue while an older one is
  open (in flight or waiting for its retry).  Due again, a queue's deliveries go out in offset
  order, and none while an older one of the queue waits for its retry: the rest of a batch whose
  head failed comes back behind the head, never before it.

Groups are in :mod:`.groups`, acks and leases in :mod:`.leases`, retry and dead letters in
:mod:`.retry`, an operator's view and offset resets in :mod:`.admin`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_service.domain import names
from broker_service.domain.consumers.copies import dead_letter
from broker_service.domain.consumers.groups import Groups, start_offset
from broker_service.domain.consumers.leases import Leases, ProgressKey
from broker_service.domain.consumers.model import (
    PROP_RETRY_TOPIC,
    ConsumerGroup,
    Delivered,
    Delivery,
    DeliveryState,
    NewDelivery,
    QueueProgress,
    Receiving,
    Subscription,
    TagFilter,
    retry_topic,
)
from broker_service.domain.errors import NotFound
from broker_service.domain.ids import new_id
from broker_service.domain.messages.model import QueueInfo, StoredMessage
from broker_service.domain.ports import ProgressStore, StoreTx

_SCAN_CHUNK = 256
_SCAN_MAX = 4096


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
    per_queue: int  # the most one queue gives (an orderly group's batch; else the budget)
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


class Receiver:
    def __init__(self, groups: Groups, leases: Leases) -> None:
        self.groups = groups
        self.leases = leases
        self._turn = itertools.count()
        # Members whose progress rows all exist (PostgreSQL: a receive then locks them at once).
        self._complete: set[tuple[str, str, tuple[str, ...]]] = set()

    # -- receive --------------------------------------------------------------------------------

    def subscriptions_of(
        self, tx: StoreTx, group_name: str, topic_name: str | None
    ) -> tuple[ConsumerGroup, list[Subscription]]:
        """The group and the subscriptions a receive reads (``topic_name``'s alone when named);
        what a receive refuses (an unknown group, a topic not subscribed) is raised here, before
        it writes anything."""
        group, subscriptions = self.groups.group_of(tx, group_name, topic_name)
        if topic_name is not None:
            subscriptions = [s for s in subscriptions if s.topic == topic_name]
            if not subscriptions:
                raise NotFound(
                    f"consumer group {group.name!r} does not subscribe to {topic_name!r}",
                    code="SUBSCRIPTION_NOT_FOUND",
                    group=group.name,
                    topic=topic_name,
                )
        return group, subscriptions

    def receive(
        self, receiving: Receiving, touch: bool = True
    ) -> Callable[[StoreTx], ReceiveResult]:
        """One look for ``receiving``'s messages; ``touch``: whether it renews the member's
        liveness (the service touches it at most once a while)."""
        group_name, client_id, topic_name = receiving.group, receiving.client_id, receiving.topic
        names.check_name(group_name, "consumer group")
        if topic_name is not None:
            names.check_user_topic(topic_name)
        invisible_ms = int(receiving.invisible_seconds * 1000)
        max_messages = receiving.max_messages

        def unit(tx: StoreTx) -> ReceiveResult:
            group, subscriptions = self.subscriptions_of(tx, group_name, topic_name)
            now = self.groups.clock()
            if touch:
                tx.touch_consumer(group.name, client_id, now)
            claim = _Claim(
                group=group,
                client_key=client_id if group.broadcasting else "",
                member=client_id,
                named_topic=topic_name,
                budget=max_messages,
                per_queue=receiving.max_per_queue if group.orderly else max_messages,
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
                self.leases.lease_ends(group.name, claim.invisible_until)
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
        if self.leases.none_due(group.name, claim.now):
            return
        client = claim.client_key if group.broadcasting else None
        due_now = tx.claim_due_deliveries(group.name, client, claim.now, claim.budget)
        if not due_now:
            claim.next_due, claim.asked_next_due = tx.next_due_at(group.name), True
            self.leases.found_none_due(group.name, claim.now, claim.next_due)
            return
        if group.orderly:
            due_now = _behind_their_heads(tx, claim, due_now)
        for due in due_now:
            if claim.left <= 0:
                break
            message = tx.get_message_at(due.topic, due.queue_id, due.queue_offset)
            key = (group.name, due.topic, due.queue_id, claim.client_key)
            if message is None:  # purged meanwhile: nothing left to deliver
                tx.set_delivery(due, due.ended(DeliveryState.EXPIRED, claim.now))
                claim.moved.add(key)
                continue
            if claim.named_topic is not None and shown_topic(message) != claim.named_topic:
                continue
            times = due.reconsume_times + 1
            if times > self.groups.max_reconsume_times(group):
                if tx.set_delivery(due, due.ended(DeliveryState.DEAD, claim.now)):
                    dead_letter(tx, group, message, times, claim.now, self.groups.config.broker_id)
                    claim.moved.add(key)
                continue
            if not tx.set_delivery(due, due.ended(DeliveryState.EXPIRED, claim.now)):
                continue
            self._hand_out(claim, message, times)
            claim.moved.add(key)

    def _claim_new(self, tx: ProgressStore, claim: _Claim, sources: dict[str, TagFilter]) -> None:
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
            want = min(claim.per_queue, claim.left)
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
        tx: ProgressStore,
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


def _behind_their_heads(
    tx: ProgressStore, claim: _Claim, due_now: list[Delivery]
) -> list[Delivery]:
    """An orderly group's due deliveries, each queue's in offset order, leaving out a queue whose
    oldest open delivery is not among them (a retry still waiting for its time): a batch's
    released rest waits behind its failed head and comes back with it, in order."""
    queues: dict[tuple[str, int], list[Delivery]] = {}
    for due in due_now:
        queues.setdefault((due.topic, due.queue_id), []).append(due)
    kept: list[Delivery] = []
    for (topic, queue_id), dues in queues.items():
        dues.sort(key=lambda d: d.queue_offset)
        oldest = tx.oldest_open_offset(claim.group.name, topic, queue_id, claim.client_key)
        if oldest is None or oldest >= dues[0].queue_offset:
            kept.extend(dues)
    return kept
