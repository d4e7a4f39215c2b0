"""How far the head of a queue may go: the rules of retention, free of any store.

A queue loses a prefix: the offsets below a new ``min_offset``.  The prefix ends at the first
message stored after the age cut (the retention, or the export watermark when it is earlier),
and never passes a reader's position -- the oldest offset a consumer group (or a live
broadcasting member) has not yet passed -- unless the hard limit says so, in which case the
reader's skipped messages are expired: counted on its position and logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from broker_service.domain import names
from broker_service.domain.config import RetentionPolicy
from broker_service.domain.consumers.model import ConsumeFrom
from broker_service.domain.retention.model import Expiry, HeadRow, Held, QueueHead, Reader

_FOREVER = 1 << 62


@dataclass(frozen=True, slots=True)
class Cuts:
    """Store times (ms): a message stored before ``age`` may go; one stored before ``hard``
    goes even when a reader has not passed it (None: never); a broadcasting member last seen
    before ``member_seen`` holds nothing."""

    age: int
    hard: int | None
    member_seen: int


def cuts_for(policy: RetentionPolicy, topic: str, now: int, exported_until: int | None) -> Cuts:
    keep = (
        policy.dead_letter_retention_ms
        if topic.startswith(names.DLQ_PREFIX)
        else policy.retention_ms
    )
    age = now - keep
    hard = None if policy.hard_limit_ms is None else now - max(policy.hard_limit_ms, keep)
    if policy.wait_for_export:
        exported = exported_until or 0
        age = min(age, exported)
        hard = None if hard is None else min(hard, exported)
    return Cuts(age=age, hard=hard, member_seen=now - policy.retention_ms)


def is_prefix_queue(topic: str) -> bool:
    """Queues that lose a prefix: users' topics, retry and dead-letter topics.  The broker's
    own (halves, op records, parked halves, delayed messages) lose rows one by one."""
    return topic.startswith((names.RETRY_PREFIX, names.DLQ_PREFIX)) or not names.is_system_topic(
        topic
    )


def first_at_or_after(head: Sequence[HeadRow], at: int, default: int) -> int:
    """The offset of the first row stored at ``at`` or later; ``default`` when none is."""
    for row in head:
        if row.stored_at >= at:
            return row.queue_offset
    return default


@dataclass(slots=True)
class QueuePlan:
    end: int  # the new min_offset (the queue's own when nothing goes)
    expiries: list[Expiry] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)
    more: bool = False  # the scan stopped at its limit: the next batch may go on


def plan_queue(
    queue: QueueHead, head: Sequence[HeadRow], readers: Sequence[Reader], cuts: Cuts, *, full: bool
) -> QueuePlan:
    """Where the head of ``queue`` may move, from the rows ``head`` (its oldest, in offset
    order; ``full``: as many as were asked, so more may follow)."""
    scanned_end = head[-1].queue_offset + 1 if head else queue.min_offset
    age_end = first_at_or_after(head, cuts.age, scanned_end)
    holds: list[Held] = []
    passing: list[tuple[str, str, int, bool]] = []  # positions a purge past them expires

    def start(reader: Reader, client_id: str) -> None:
        """A reader with no position yet starts where ``consume_from`` says."""
        if reader.own_retry_topic or reader.consume_from is ConsumeFrom.FIRST_OFFSET:
            offset = queue.min_offset
        elif reader.consume_from is ConsumeFrom.TIMESTAMP and reader.consume_timestamp is not None:
            offset = first_at_or_after(head, reader.consume_timestamp, scanned_end)
        else:
            return  # LAST_OFFSET: it starts at the end, whatever is purged
        holds.append(Held(queue.topic, queue.queue_id, reader.group, client_id, offset))

    for reader in readers:
        positions = {p.client_id: p for p in reader.positions.get(queue.queue_id, ())}
        if reader.broadcasting:
            live = [c for c, seen in reader.members.items() if seen >= cuts.member_seen]
            for client_id in live:
                if client_id not in positions:
                    start(reader, client_id)
            if not live:
                start(reader, "")
            for client_id, at in positions.items():
                offset = at.committed_offset
                if client_id in live:
                    holds.append(Held(queue.topic, queue.queue_id, reader.group, client_id, offset))
                passing.append((reader.group, client_id, offset, client_id not in live))
        else:
            own = positions.get("")
            if own is None:
                start(reader, "")
            else:
                offset = own.committed_offset
                holds.append(Held(queue.topic, queue.queue_id, reader.group, "", offset))
                passing.append((reader.group, "", offset, False))

    hold_end = min((h.offset for h in holds), default=_FOREVER)
    hard_end = queue.min_offset
    if cuts.hard is not None:
        hard_end = first_at_or_after(head, cuts.hard, scanned_end)
    end = max(queue.min_offset, min(age_end, max(hold_end, hard_end)))
    plan = QueuePlan(end=end, more=full and end == scanned_end)
    plan.held = [h for h in holds if h.offset < age_end]
    plan.expiries = [
        Expiry(group, client_id, queue.topic, queue.queue_id, offset, end, idle)
        for group, client_id, offset, idle in passing
        if offset < end
    ]
    return plan
