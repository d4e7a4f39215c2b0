"""Consumer lag as the console shows it: the groups list and a group's page by one rule.

Where the group (a broadcasting group: the member) has a committed offset in a queue, the lag is
the queue's max offset minus it.  Where it has none yet -- its retry topic before its first
receive, a broadcasting group before a member receives -- the lag is what the group would have to
consume if it received now: the max offset minus where the broker would start it there, by
:func:`~broker_service.domain.consumers.groups.start_offset`, the very rule a receive uses (its
retry topic and ``FIRST_OFFSET`` from the queue's min offset, ``LAST_OFFSET`` from its max
offset, ``TIMESTAMP`` from the first message stored at or after its time).  So an empty retry
queue has lag 0 and a new ``LAST_OFFSET`` group is caught up, as ``halfmq_consumer_lag_messages``
says.  A group's lag sums its subscribed topics' queues (its retry topic is "retrying"); per queue
a broadcasting group counts its least advanced live member (every member it recorded when none
is live), as the metrics do.

A lag is ``None`` -- "unknown" on the page -- only when the store could not be read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker_service.domain import names
from broker_service.domain.consumers.groups import start_offset
from broker_service.domain.consumers.model import GroupView
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.errors import Busy, NotReady
from broker_service.domain.ports import StoreTx
from broker_service.domain.ports.consumers import GroupQueueProgress

log = logging.getLogger("halfmq.console")

# What the store says when it cannot answer a read (a failed statement, the store down or busy).
UNREADABLE = (NotReady, Busy)

QueueKey = tuple[str, int]  # (topic, queue_id)


@dataclass(frozen=True, slots=True)
class Position:
    """One progress row in a queue: the group's (clustering) or a member's (broadcasting)."""

    committed: int | None
    last_seen_at: int | None  # the member's last receive; None for the group or one not recorded


def queue_lag(
    broadcasting: bool,
    max_offset: int,
    positions: Sequence[Position],
    live_since: int,
    from_start: int | None,
) -> int | None:
    """One queue's lag for the group: from its committed offset(s), else ``from_start`` (the lag
    were it to start there now; None when that could not be read)."""
    known = [p for p in positions if p.committed is not None]
    if not known:
        return from_start
    if broadcasting:
        live = [p for p in known if p.last_seen_at is not None and p.last_seen_at >= live_since]
        least = min(p.committed for p in live or known if p.committed is not None)
    else:
        least = min(p.committed for p in known if p.committed is not None)
    return max(0, max_offset - least)


def _start_lags(
    wanted: Mapping[str, set[QueueKey]],
) -> Callable[[StoreTx], dict[tuple[str, str, int], int]]:
    """A read unit: for each (group, topic, queue) where the group has no offset, the queue's max
    offset minus where a receive would start the group there now."""

    def unit(tx: StoreTx) -> dict[tuple[str, str, int], int]:
        found: dict[tuple[str, str, int], int] = {}
        for group_name in sorted(wanted):
            group = tx.get_consumer_group(group_name)
            if group is None:  # deleted meanwhile: nothing to tell
                continue
            queues = wanted[group_name]
            for topic in sorted({topic for topic, _ in queues}):
                for info in tx.queue_infos(topic):
                    if (topic, info.queue_id) in queues:
                        start = start_offset(tx, group, info)
                        found[(group_name, topic, info.queue_id)] = max(0, info.max_offset - start)
        return found

    return unit


async def start_lags(
    consumers: ConsumerService, wanted: Mapping[str, set[QueueKey]]
) -> dict[tuple[str, str, int], int] | None:
    """:func:`_start_lags`, or None when the store could not answer."""
    if not any(wanted.values()):
        return {}
    try:
        return await consumers.store.read(_start_lags(wanted))
    except UNREADABLE as error:
        log.warning("console: where the groups would start could not be read: %s", error.message)
        return None


def _sum(lags: Iterable[int | None]) -> int | None:
    total = 0
    for lag in lags:
        if lag is None:
            return None
        total += lag
    return total


# -- the groups list -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupBacklog:
    group: str
    lag: int | None  # None: unknown
    retrying: int | None  # its retry topic's lag
    dead: int


async def backlogs(consumers: ConsumerService) -> list[GroupBacklog] | None:
    """Every group's lag, retry lag and dead letters (None: the store could not be read)."""

    def progress(tx: StoreTx) -> tuple[list[GroupQueueProgress], dict[str, int]]:
        return tx.all_groups_progress(), tx.dead_letter_counts()

    try:
        rows, dead = await consumers.store.read(progress)
    except UNREADABLE as error:
        log.warning("console: the consumer groups' backlog could not be read: %s", error.message)
        return None
    live_since = consumers.clock() - consumers.config.consumer_expiry_ms
    by_queue: dict[tuple[str, str, int], list[GroupQueueProgress]] = {}
    for row in rows:
        by_queue.setdefault((row.group, row.topic, row.queue_id), []).append(row)
    positions: dict[tuple[str, str, int], list[Position]] = {}
    wanted: dict[str, set[QueueKey]] = {}
    for (group, topic, queue_id), found in by_queue.items():
        mine = [
            Position(r.committed_offset, r.last_seen_at if r.broadcasting else None)
            for r in found
            if r.client_id is not None and (r.broadcasting or r.client_id == "")
        ]
        positions[(group, topic, queue_id)] = mine
        if not any(p.committed is not None for p in mine):
            wanted.setdefault(group, set()).add((topic, queue_id))
    starts = await start_lags(consumers, wanted)
    lags: dict[str, list[int | None]] = {}
    retrying: dict[str, list[int | None]] = {}
    for key, found in by_queue.items():
        group, topic, _ = key
        first = found[0]
        from_start = None if starts is None else starts.get(key)
        lag = queue_lag(
            first.broadcasting, first.max_offset, positions[key], live_since, from_start
        )
        into = retrying if topic.startswith(names.RETRY_PREFIX) else lags
        into.setdefault(group, []).append(lag)
    known = sorted(set(dead) | set(lags) | set(retrying))
    return [
        GroupBacklog(g, _sum(lags.get(g, [])), _sum(retrying.get(g, [])), dead.get(g, 0))
        for g in known
    ]


# -- a group's page --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LagRow:
    topic: str
    queue_id: int
    client_id: str
    committed_offset: int | None
    max_offset: int
    lag: int | None  # None: unknown
    in_flight: int
    retrying: int
    dead: int
    expired: int


@dataclass(frozen=True, slots=True)
class GroupLag:
    rows: list[LagRow]
    total: int | None  # the subscribed topics' queues, as the groups list and the metrics
    retry: int | None  # its retry topic's queues


async def group_lag(consumers: ConsumerService, view: GroupView) -> GroupLag:
    group = view.group
    wanted = {
        group.name: {(q.topic, q.queue_id) for q in view.queues if q.committed_offset is None}
    }
    starts = await start_lags(consumers, wanted)

    def from_start(topic: str, queue_id: int) -> int | None:
        return None if starts is None else starts.get((group.name, topic, queue_id))

    seen = {m.client_id: m.last_seen_at for m in view.members}
    rows: list[LagRow] = []
    by_queue: dict[QueueKey, list[Position]] = {}
    max_offsets: dict[QueueKey, int] = {}
    for q in view.queues:
        if q.committed_offset is None:
            lag = from_start(q.topic, q.queue_id)
        else:
            lag = max(0, q.max_offset - q.committed_offset)
        rows.append(
            LagRow(
                q.topic,
                q.queue_id,
                q.client_id,
                q.committed_offset,
                q.max_offset,
                lag,
                q.in_flight,
                q.retrying,
                q.dead,
                q.expired,
            )
        )
        last_seen = seen.get(q.client_id) if group.broadcasting else None
        by_queue.setdefault((q.topic, q.queue_id), []).append(
            Position(q.committed_offset, last_seen)
        )
        max_offsets[(q.topic, q.queue_id)] = q.max_offset
    per_queue = {
        key: queue_lag(
            group.broadcasting,
            max_offsets[key],
            found,
            view.live_since,
            from_start(*key),
        )
        for key, found in by_queue.items()
    }
    retry = names.RETRY_PREFIX
    return GroupLag(
        rows,
        _sum(lag for (topic, _), lag in per_queue.items() if not topic.startswith(retry)),
        _sum(lag for (topic, _), lag in per_queue.items() if topic.startswith(retry)),
    )
