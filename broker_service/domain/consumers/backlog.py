"""Every consumer group's backlog at once, for the metrics: lag per topic and queue, retry and DLQ
depth.

The lag of a queue is what ``GET /v1/consumer-groups/{group}`` shows for it: the queue's max
offset minus the committed offset (none yet: from 0).  A broadcasting group has one offset per
member; its lag is its least advanced live member's (of every member it recorded when none is
live), since that member still has the most to consume.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker_service.domain import names
from broker_service.domain.ports import StoreTx
from broker_service.domain.ports.consumers import GroupQueueProgress


@dataclass(frozen=True, slots=True)
class QueueLag:
    group: str
    topic: str
    queue_id: int
    messages: int


@dataclass(frozen=True, slots=True)
class Backlog:
    lags: list[QueueLag]  # the subscribed topics' queues
    retrying: dict[str, int]  # group -> its retry topic's lag
    dead: dict[str, int]  # group -> dead letters not resent


def backlog(clock: Callable[[], int], expiry_ms: int) -> Callable[[StoreTx], Backlog]:
    """A read unit: two statements, whatever the number of groups (see the store's port)."""

    def unit(tx: StoreTx) -> Backlog:
        return summarize(tx.all_groups_progress(), tx.dead_letter_counts(), clock() - expiry_ms)

    return unit


def summarize(rows: Sequence[GroupQueueProgress], dead: dict[str, int], live_since: int) -> Backlog:
    by_queue: dict[tuple[str, str, int], list[GroupQueueProgress]] = {}
    for row in rows:
        by_queue.setdefault((row.group, row.topic, row.queue_id), []).append(row)
    lags: list[QueueLag] = []
    retrying = dict.fromkeys(dead, 0)
    for (group, topic, queue_id), progress in by_queue.items():
        messages = queue_lag(progress, live_since)
        if topic.startswith(names.RETRY_PREFIX):
            retrying[group] = retrying.get(group, 0) + messages
        else:
            lags.append(QueueLag(group, topic, queue_id, messages))
    return Backlog(lags, retrying, dead)


def queue_lag(progress: Sequence[GroupQueueProgress], live_since: int) -> int:
    """One queue's lag for one group, from its rows in that queue (one per member, broadcasting)."""
    first = progress[0]
    if not first.broadcasting:
        committed = next((r.committed_offset for r in progress if r.client_id == ""), None)
        return first.max_offset - (committed or 0)
    members = [r for r in progress if r.client_id is not None and r.committed_offset is not None]
    live = [r for r in members if r.last_seen_at is not None and r.last_seen_at >= live_since]
    offsets = [r.committed_offset or 0 for r in live or members]
    return first.max_offset - min(offsets, default=0)
