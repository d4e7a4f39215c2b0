"""Consumer lag: the one rule, and every consumer group's backlog at once (lag per topic and
queue, retry and DLQ depth) for the metrics and the console's groups list.

The lag of a queue for a group is what it still has to consume there.  Where the group (a
broadcasting group: a member) has a committed offset, it is the queue's max offset minus it.
Where it has none yet -- its retry topic before its first receive, a broadcasting group before a
member receives -- it is the max offset minus where a receive would start it now, by
:func:`~broker_service.domain.consumers.groups.start_offset`, the very rule a receive uses (the
retry topic and ``FIRST_OFFSET`` from the queue's min offset, ``LAST_OFFSET`` from its max
offset, ``TIMESTAMP`` from the first message stored at or after its time).  So an empty retry
queue has lag 0 and a new ``LAST_OFFSET`` group is caught up.  A broadcasting group has one
offset per member: its lag in a queue is its least advanced live member's (of every member it
recorded when none is live), since that member still has the most to consume.

The same rule makes ``halfmq_consumer_lag_messages``, the ``lag`` of
``GET /v1/consumer-groups/{group}`` (:meth:`ConsumerAdmin.view
<broker_service.domain.consumers.admin.ConsumerAdmin.view>`) and the console's figures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from broker_service.domain import names
from broker_service.domain.consumers.groups import start_offset
from broker_service.domain.messages.model import QueueInfo
from broker_service.domain.ports import StoreTx
from broker_service.domain.ports.consumers import GroupQueueProgress

QueueKey = tuple[str, str, int]  # (group, topic, queue_id)


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


# -- the rule -------------------------------------------------------------------------------------


def lag_from(max_offset: int, offset: int) -> int:
    """Messages from ``offset`` (committed, or where the group would start) to the queue's end."""
    return max(0, max_offset - offset)


def committed_positions(progress: Sequence[GroupQueueProgress]) -> list[GroupQueueProgress]:
    """The group's rows in one queue that hold a committed offset: the group's own row
    (clustering), each member's (broadcasting)."""
    return [
        r
        for r in progress
        if r.committed_offset is not None
        and r.client_id is not None
        and (r.broadcasting or r.client_id == "")
    ]


def queue_lag(
    progress: Sequence[GroupQueueProgress], live_since: int, start: int | None
) -> int | None:
    """One queue's lag for one group, from its rows in that queue (one per member, broadcasting).
    ``start``: where a receive would start the group there now, needed only where it has no
    offset (None: not known, and then neither is the lag)."""
    max_offset = progress[0].max_offset
    known = committed_positions(progress)
    if not known:
        return None if start is None else lag_from(max_offset, start)
    if known[0].broadcasting:
        live = [r for r in known if r.last_seen_at is not None and r.last_seen_at >= live_since]
        known = live or known
    return lag_from(
        max_offset, min(r.committed_offset for r in known if r.committed_offset is not None)
    )


def start_offsets(tx: StoreTx, wanted: Mapping[str, set[tuple[str, int]]]) -> dict[QueueKey, int]:
    """Where a receive would start each group now in each (topic, queue) of ``wanted`` (group ->
    queues it has no offset in): per group its record, per topic its queues (read once for every
    group), per queue of a ``TIMESTAMP`` group the first message at its time.  A group deleted
    meanwhile has none."""
    infos: dict[str, list[QueueInfo]] = {}
    found: dict[QueueKey, int] = {}
    for group_name in sorted(wanted):
        queues = wanted[group_name]
        if not queues:
            continue
        group = tx.get_consumer_group(group_name)
        if group is None:
            continue
        for topic in sorted({topic for topic, _ in queues}):
            if topic not in infos:
                infos[topic] = tx.queue_infos(topic)
            for info in infos[topic]:
                if (topic, info.queue_id) in queues:
                    found[(group_name, topic, info.queue_id)] = start_offset(tx, group, info)
    return found


# -- every group at once --------------------------------------------------------------------------


def backlog(clock: Callable[[], int], expiry_ms: int) -> Callable[[StoreTx], Backlog]:
    """A read unit: two statements whatever the number of groups (see the store's port), then,
    only for the queues where a group has no offset yet, where it would start there."""

    def unit(tx: StoreTx) -> Backlog:
        rows = tx.all_groups_progress()
        dead = tx.dead_letter_counts()
        return summarize(rows, dead, clock() - expiry_ms, lambda wanted: start_offsets(tx, wanted))

    return unit


def summarize(
    rows: Sequence[GroupQueueProgress],
    dead: dict[str, int],
    live_since: int,
    starts: Callable[[Mapping[str, set[tuple[str, int]]]], Mapping[QueueKey, int]],
) -> Backlog:
    """The backlog from the rows of :meth:`all_groups_progress`; ``starts`` reads where the groups
    would start in the queues they have no offset in (called once, with only those)."""
    by_queue: dict[QueueKey, list[GroupQueueProgress]] = {}
    for row in rows:
        by_queue.setdefault((row.group, row.topic, row.queue_id), []).append(row)
    wanted: dict[str, set[tuple[str, int]]] = {}
    for (group, topic, queue_id), progress in by_queue.items():
        if not committed_positions(progress):
            wanted.setdefault(group, set()).add((topic, queue_id))
    found = starts(wanted) if wanted else {}
    lags: list[QueueLag] = []
    retrying = dict.fromkeys(dead, 0)
    for key, progress in by_queue.items():
        group, topic, queue_id = key
        messages = queue_lag(progress, live_since, found.get(key))
        if messages is None:  # no offset, and no start: the group was deleted meanwhile
            continue
        if topic.startswith(names.RETRY_PREFIX):
            retrying[group] = retrying.get(group, 0) + messages
        else:
            lags.append(QueueLag(group, topic, queue_id, messages))
    return Backlog(lags, retrying, dead)
