"""The progress part of ``SqlTx``: each group's (or broadcasting member's) offsets in each queue.

Claims live in the database.  A receive locks the group's progress rows of a topic
(``FOR UPDATE SKIP LOCKED`` on PostgreSQL: another broker serving the same group takes the other
queues) and due deliveries the same way (``store/deliveries.py``), so no message is handed to two
members at once.  SQLite has one writer, which serializes claims by itself.

A queue's committed offset is the oldest offset still open (in flight, or an orderly retry waiting),
else its pull offset: a lookup in the partial index of open deliveries, however many deliveries were
acked out of order behind it.

PostgreSQL: acks racing on one queue.  An ack (a nack, a receive) moves the offset in its own
transaction, and under READ COMMITTED its statement cannot see another ack's deliveries that are
ACKED but not yet committed: the offset it writes stops at them.  The other ack, finding the row
held (``SKIP LOCKED``: it never waits inside its unit), notes the queue (:attr:`held_progress`), and
once its own unit has committed the claims runner moves that offset again in a transaction of its
own (:meth:`settle_progress`): it waits for the holder's commit, then reads with a snapshot that
sees both.  Without that step the offset stayed behind -- the group view showed a lag of a few
messages with nothing in flight -- until the queue's next ack or receive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    and_,
    any_,
    bindparam,
    func,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql

from broker_service.domain.consumers.model import QueueProgress
from broker_service.domain.messages.model import QueueInfo, StoredMessage
from broker_service.store import rows
from broker_service.store.deliveries import OPEN, group_queue
from broker_service.store.fastpath import Prepared
from broker_service.store.part import SqlPart
from broker_service.store.schema import consumer_offsets, deliveries, messages, queues, topics
from broker_service.store.statements import queue_from

o = consumer_offsets.c
ProgressKey = tuple[str, str, int, str]  # (group, topic, queue, client; '' for the group)
d = deliveries.c
m = messages.c

_all_progress = (
    select(consumer_offsets)
    .where(o.consumer_group == bindparam("group"))
    .order_by(o.topic, o.queue_id, o.client_id)
)
_save_progress = (
    update(consumer_offsets)
    .where(*group_queue(o), o.client_id == bindparam("b_client"))
    .values(
        committed_offset=bindparam("b_committed"),
        pulled_offset=bindparam("b_pulled"),
        updated_at=bindparam("b_at"),
    )
)

# PostgreSQL: the progress of every queue a receive moved, in one statement (see store/bulk.py).
_save_progress_pg = text(
    "UPDATE consumer_offsets SET committed_offset = v.committed, pulled_offset = v.pulled,"
    " updated_at = :at"
    " FROM unnest(CAST(:groups AS VARCHAR[]), CAST(:topics AS VARCHAR[]),"
    " CAST(:queue_ids AS INTEGER[]), CAST(:clients AS VARCHAR[]), CAST(:committed AS BIGINT[]),"
    " CAST(:pulled AS BIGINT[])) AS v(consumer_group, topic, queue_id, client_id, committed, pulled)"
    " WHERE consumer_offsets.consumer_group = v.consumer_group"
    " AND consumer_offsets.topic = v.topic AND consumer_offsets.queue_id = v.queue_id"
    " AND consumer_offsets.client_id = v.client_id"
)

# client '' is the group's progress (clustering): every member's deliveries hold it back.
_oldest_open = select(func.min(d.queue_offset)).where(
    d.consumer_group == bindparam("group"),
    d.topic == bindparam("topic"),
    d.queue_id == bindparam("queue"),
    or_(bindparam("client") == "", d.client_id == bindparam("client")),
    OPEN,
)

# committed = the oldest open offset of the queue, else the pull offset.
_oldest_open_of_row = (
    select(func.min(d.queue_offset))
    .where(
        d.consumer_group == o.consumer_group,
        d.topic == o.topic,
        d.queue_id == o.queue_id,
        or_(o.client_id == "", d.client_id == o.client_id),
        OPEN,
    )
    .scalar_subquery()
)
_q = queues.c
# A queue's bounds and a group's progress in it: what the overview and the claims read.
_QUEUE_AND_PROGRESS = (
    _q.topic,
    _q.queue_id,
    _q.min_offset,
    _q.next_offset,
    o.committed_offset,
    o.pulled_offset,
)
_overview = (
    select(*_QUEUE_AND_PROGRESS)
    .join(topics, topics.c.name == _q.topic)
    .outerjoin(
        consumer_offsets,
        and_(
            o.topic == _q.topic,
            o.queue_id == _q.queue_id,
            o.consumer_group == bindparam("group"),
            o.client_id == bindparam("client"),
        ),
    )
    .where(_q.topic.in_(bindparam("topics", expanding=True)))
    .order_by(_q.topic, _q.queue_id)
)
# PostgreSQL runs the hot statements of receives and acks precompiled (store/fastpath.py), with
# arrays where SQLite takes an expanding IN: one statement text whatever the count.
_TEXTS = postgresql.ARRAY(String)
_INTS = postgresql.ARRAY(Integer)
# PostgreSQL only (SQLite serializes claims in its one writer).
_candidates_locked = Prepared(
    select(*_QUEUE_AND_PROGRESS)
    .select_from(consumer_offsets)
    .join(queues, and_(_q.topic == o.topic, _q.queue_id == o.queue_id))
    .join(topics, topics.c.name == o.topic)
    .where(
        o.consumer_group == bindparam("group"),
        o.client_id == bindparam("client"),
        o.topic == any_(bindparam("topics", type_=_TEXTS)),
        o.pulled_offset < _q.next_offset,
    )
    .order_by(o.topic, o.queue_id)
    .with_for_update(of=consumer_offsets, skip_locked=True)
)


# One statement for all the queues an ack touched (per group and member).
_advance = (
    update(consumer_offsets)
    .where(o.consumer_group == bindparam("b_group"), o.client_id == bindparam("b_client"))
    .values(
        committed_offset=func.coalesce(_oldest_open_of_row, o.pulled_offset),
        updated_at=bindparam("b_at"),
    )
)
_advance_queues = _advance.where(
    tuple_(o.topic, o.queue_id).in_(bindparam("b_keys", expanding=True))
)
# PostgreSQL: a row another unit holds is skipped (and settled after the commit); the rows moved
# come back, so that the skipped ones are known.
_held = consumer_offsets.alias("held")
_advance_queues_unless_held = Prepared(
    _advance.where(
        tuple_(o.topic, o.queue_id).in_(
            select(_held.c.topic, _held.c.queue_id)
            .where(
                _held.c.consumer_group == bindparam("b_group"),
                _held.c.client_id == bindparam("b_client"),
                tuple_(_held.c.topic, _held.c.queue_id).in_(
                    select(
                        func.unnest(bindparam("b_topics", type_=_TEXTS)),
                        func.unnest(bindparam("b_queue_ids", type_=_INTS)),
                    )
                ),
            )
            .with_for_update(skip_locked=True)
        )
    ).returning(o.topic, o.queue_id)
)
# Settling: wait for the rows (in key order, so that two settles never wait on each other).
_lock_progress = (
    select(o.topic, o.queue_id)
    .where(
        o.consumer_group == bindparam("group"),
        o.client_id == bindparam("client"),
        tuple_(o.topic, o.queue_id).in_(bindparam("keys", expanding=True)),
    )
    .order_by(o.topic, o.queue_id)
    .with_for_update()
)

_first_since = select(func.min(m.queue_offset)).where(
    m.topic == bindparam("topic"),
    m.queue_id == bindparam("queue"),
    m.stored_at >= bindparam("at"),
)
_messages_from = queue_from(messages)


class ProgressPart(SqlPart):
    # PostgreSQL: the progress rows this unit's advances found held, with when (see the module).
    held_progress: dict[ProgressKey, int]

    def progress_overview(
        self, group: str, topics: Sequence[str], client_id: str
    ) -> list[tuple[QueueInfo, QueueProgress | None]]:
        """Every queue of the (existing) ``topics`` with the group's progress in it, unlocked."""
        params = {"group": group, "client": client_id, "topics": list(topics)}
        found: list[tuple[QueueInfo, QueueProgress | None]] = []
        for r in self.conn.execute(_overview, params):
            info = QueueInfo(r.topic, r.queue_id, r.min_offset, r.next_offset)
            progress = None
            if r.committed_offset is not None:
                progress = QueueProgress(
                    group, r.topic, r.queue_id, client_id, r.committed_offset, r.pulled_offset
                )
            found.append((info, progress))
        return found

    def init_progress(self, progress: Sequence[QueueProgress], at: int) -> None:
        if not progress:
            return
        self.conn.execute(
            self._insert()(consumer_offsets).on_conflict_do_nothing(),
            [
                {
                    "consumer_group": p.consumer_group,
                    "topic": p.topic,
                    "queue_id": p.queue_id,
                    "client_id": p.client_id,
                    "committed_offset": p.committed_offset,
                    "pulled_offset": p.pulled_offset,
                    "updated_at": at,
                }
                for p in progress
            ],
        )

    def save_progress(self, progress: QueueProgress | Sequence[QueueProgress], at: int) -> None:
        many = [progress] if isinstance(progress, QueueProgress) else list(progress)
        if not many:
            return
        if self._postgres:
            params: dict[str, Any] = {
                "groups": [p.consumer_group for p in many],
                "topics": [p.topic for p in many],
                "queue_ids": [p.queue_id for p in many],
                "clients": [p.client_id for p in many],
                "committed": [p.committed_offset for p in many],
                "pulled": [p.pulled_offset for p in many],
                "at": at,
            }
            self.conn.execute(_save_progress_pg, params)
            return
        self.conn.execute(
            _save_progress,
            [
                {
                    "b_group": p.consumer_group,
                    "b_topic": p.topic,
                    "b_queue": p.queue_id,
                    "b_client": p.client_id,
                    "b_committed": p.committed_offset,
                    "b_pulled": p.pulled_offset,
                    "b_at": at,
                }
                for p in many
            ],
        )

    def advance_committed(self, keys: Sequence[ProgressKey], at: int) -> None:
        """Move the committed offset of each (group, topic, queue, client) to its oldest open
        offset (else its pull offset).  PostgreSQL: a row another unit holds right now is not
        waited for here (a unit never waits for a progress row while it holds deliveries); it is
        noted in :attr:`held_progress`, for the claims runner to settle once this unit has
        committed -- the holder's own reading may predate this unit's acks."""
        for (group, client), queue_keys in _by_member(keys).items():
            if self._postgres:
                topics, queue_ids = (list(column) for column in zip(*queue_keys, strict=True))
                params = {
                    "b_group": group,
                    "b_client": client,
                    "b_topics": topics,
                    "b_queue_ids": queue_ids,
                    "b_at": at,
                }
                moved = {
                    (r["topic"], r["queue_id"])
                    for r in _advance_queues_unless_held.all(self.conn, params)
                }
                for topic, queue_id in queue_keys:
                    if (topic, queue_id) not in moved:
                        self.held_progress[(group, topic, queue_id, client)] = at
                continue
            params = {"b_group": group, "b_client": client, "b_keys": queue_keys, "b_at": at}
            self.conn.execute(_advance_queues, params)

    def settle_progress(self, held: Mapping[ProgressKey, int]) -> None:
        """Move the committed offsets an earlier unit found held, in a transaction of their own
        after that unit committed: wait for each row (the holder's commit), then move it in a
        statement of its own, whose snapshot sees the holder's acks and the earlier unit's."""
        at = max(held.values(), default=0)
        for (group, client), queue_keys in _by_member(held).items():
            params = {"group": group, "client": client, "keys": queue_keys}
            self.conn.execute(_lock_progress, params)
            moved = {"b_group": group, "b_client": client, "b_keys": queue_keys, "b_at": at}
            self.conn.execute(_advance_queues, moved)

    def lock_candidates(
        self, group: str, topics: Sequence[str], client_id: str
    ) -> list[tuple[QueueInfo, QueueProgress]]:
        """PostgreSQL: the group's queues of ``topics`` with something new, locked unless another
        broker holds them (``FOR UPDATE SKIP LOCKED``), as they are now."""
        params = {"group": group, "client": client_id, "topics": list(topics)}
        return [
            (
                QueueInfo(r["topic"], r["queue_id"], r["min_offset"], r["next_offset"]),
                QueueProgress(
                    group,
                    r["topic"],
                    r["queue_id"],
                    client_id,
                    r["committed_offset"],
                    r["pulled_offset"],
                ),
            )
            for r in _candidates_locked.all(self.conn, params)
        ]

    def list_progress(self, group: str) -> list[QueueProgress]:
        result = self.conn.execute(_all_progress, {"group": group})
        return [rows.queue_progress(r._mapping) for r in result]

    def oldest_open_offset(
        self, group: str, topic: str, queue_id: int, client_id: str
    ) -> int | None:
        value = self.conn.execute(
            _oldest_open, {"group": group, "topic": topic, "queue": queue_id, "client": client_id}
        ).scalar()
        return None if value is None else int(value)

    def first_offset_since(self, topic: str, queue_id: int, at: int) -> int | None:
        value = self.conn.execute(
            _first_since, {"topic": topic, "queue": queue_id, "at": at}
        ).scalar()
        return None if value is None else int(value)

    def messages_from(
        self, topic: str, queue_id: int, offset: int, limit: int
    ) -> list[StoredMessage]:
        params = {"topic": topic, "queue": queue_id, "offset": offset, "limit": limit}
        return [rows.stored_message(r) for r in _messages_from.all(self.conn, params)]


def _by_member(keys: Iterable[ProgressKey]) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """Progress keys as (topic, queue) lists per (group, client), all in key order."""
    by_member: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for group, topic, queue_id, client in sorted(set(keys)):
        by_member.setdefault((group, client), []).append((topic, queue_id))
    return by_member
