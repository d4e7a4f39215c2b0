"""The consumer part of ``SqlTx``: groups, subscriptions, progress per queue, and deliveries.

Claims live in the database.  A receive locks the group's progress rows of a topic
(``FOR UPDATE SKIP LOCKED`` on PostgreSQL: another broker serving the same group takes the other
queues) and due deliveries the same way, so no message is handed to two members at once.  SQLite has
one writer, which serializes claims by itself.

A queue's committed offset is the oldest offset still open (in flight, or an orderly retry waiting),
else its pull offset: a lookup in the partial index of open deliveries, however many deliveries were
acked out of order behind it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import anyio.to_thread
from sqlalchemy import (
    Connection,
    Integer,
    String,
    and_,
    any_,
    bindparam,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from broker_service.acl import nonces
from broker_service.acl.nonces import NonceKey
from broker_service.domain import names
from broker_service.domain.consumer_model import (
    OPEN_STATES,
    ConsumeFrom,
    ConsumerGroup,
    Delivery,
    DeliveryState,
    Member,
    MessageModel,
    NewDelivery,
    QueueProgress,
    Subscription,
)
from broker_service.domain.errors import BrokerError, NotReady
from broker_service.domain.model import QueueInfo, StoredMessage
from broker_service.store import rows
from broker_service.store.bulk import BulkInsert
from broker_service.store.fastpath import Prepared
from broker_service.store.schema import (
    consumer_groups,
    consumer_offsets,
    consumers,
    deliveries,
    messages,
    queues,
    subscriptions,
    topics,
    trace_events,
)

T = TypeVar("T")

g = consumer_groups.c
s = subscriptions.c
o = consumer_offsets.c
d = deliveries.c
m = messages.c

_group = select(consumer_groups).where(g.name == bindparam("name"))
_subscriptions = (
    select(subscriptions).where(s.consumer_group == bindparam("group")).order_by(s.topic)
)
_members = (
    select(consumers).where(consumers.c.consumer_group == bindparam("group")).order_by("client_id")
)

_all_progress = (
    select(consumer_offsets)
    .where(o.consumer_group == bindparam("group"))
    .order_by(o.topic, o.queue_id, o.client_id)
)
_save_progress = (
    update(consumer_offsets)
    .where(
        o.consumer_group == bindparam("b_group"),
        o.topic == bindparam("b_topic"),
        o.queue_id == bindparam("b_queue"),
        o.client_id == bindparam("b_client"),
    )
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

# Literal, as in the partial indexes' predicate: only then do the planners use those indexes.
_open = text("deliveries.state IN ('INFLIGHT', 'RETRYING')")
assert OPEN_STATES == ("INFLIGHT", "RETRYING")
# client '' is the group's progress (clustering): every member's deliveries hold it back.
_oldest_open = select(func.min(d.queue_offset)).where(
    d.consumer_group == bindparam("group"),
    d.topic == bindparam("topic"),
    d.queue_id == bindparam("queue"),
    or_(bindparam("client") == "", d.client_id == bindparam("client")),
    _open,
)

# committed = the oldest open offset of the queue, else the pull offset.
_oldest_open_of_row = (
    select(func.min(d.queue_offset))
    .where(
        d.consumer_group == o.consumer_group,
        d.topic == o.topic,
        d.queue_id == o.queue_id,
        or_(o.client_id == "", d.client_id == o.client_id),
        _open,
    )
    .scalar_subquery()
)
_q = queues.c
_overview = (
    select(
        _q.topic,
        _q.queue_id,
        _q.min_offset,
        _q.next_offset,
        o.committed_offset,
        o.pulled_offset,
    )
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
    select(
        _q.topic,
        _q.queue_id,
        _q.min_offset,
        _q.next_offset,
        o.committed_offset,
        o.pulled_offset,
    )
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
# PostgreSQL: a row another broker holds is left to it.
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
    )
)

_first_since = select(func.min(m.queue_offset)).where(
    m.topic == bindparam("topic"),
    m.queue_id == bindparam("queue"),
    m.stored_at >= bindparam("at"),
)
_messages_from = Prepared(
    select(messages)
    .where(
        m.topic == bindparam("topic"),
        m.queue_id == bindparam("queue"),
        m.queue_offset >= bindparam("offset"),
    )
    .order_by(m.queue_offset)
    .limit(bindparam("limit"))
)

_insert_deliveries = BulkInsert(
    deliveries,
    (
        "consumer_group",
        "client_id",
        "topic",
        "queue_id",
        "queue_offset",
        "msg_id",
        "receipt_handle",
        "state",
        "reconsume_times",
        "delivered_at",
        "invisible_until",
    ),
)

_due = (
    select(deliveries)
    .where(d.consumer_group == bindparam("group"), _open, d.invisible_until <= bindparam("now"))
    .order_by(d.invisible_until)
    .limit(bindparam("limit"))
)
_due_of_client = _due.where(d.client_id == bindparam("client"))
# Each receive looks for due deliveries first: run precompiled (see store/fastpath.py).
_due_queries = {
    (client, locked): Prepared(query.with_for_update(skip_locked=True) if locked else query)
    for client, query in ((False, _due), (True, _due_of_client))
    for locked in (False, True)
}
_next_due = select(func.min(d.invisible_until)).where(d.consumer_group == bindparam("group"), _open)

_by_handle = select(deliveries).where(
    d.consumer_group == bindparam("group"), d.receipt_handle == bindparam("handle")
)
# The in-flight, still invisible deliveries behind some handles, ended (ack, nack).
_finish_live = (
    update(deliveries)
    .where(
        d.consumer_group == bindparam("b_group"),
        d.state == DeliveryState.INFLIGHT.value,
        d.invisible_until > bindparam("b_now"),
    )
    .values(state=bindparam("b_state"), finished_at=bindparam("b_now"))
    .returning(*deliveries.c)
)
_finish = _finish_live.where(d.receipt_handle.in_(bindparam("b_handles", expanding=True)))
_finish_pg = Prepared(
    _finish_live.where(d.receipt_handle == any_(bindparam("b_handles", type_=_TEXTS)))
)
_set_delivery = (
    update(deliveries)
    .where(d.id == bindparam("b_id"), d.state == bindparam("b_from"))
    .values(
        state=bindparam("b_state"),
        receipt_handle=bindparam("b_handle"),
        invisible_until=bindparam("b_until"),
        finished_at=bindparam("b_finished"),
    )
)
_expire_queue = (
    update(deliveries)
    .where(
        d.consumer_group == bindparam("b_group"),
        d.topic == bindparam("b_topic"),
        d.queue_id == bindparam("b_queue"),
        _open,
    )
    .values(state=DeliveryState.EXPIRED.value, finished_at=bindparam("b_now"))
)
_visible_now = case((d.invisible_until > bindparam("now"), 0), else_=1)
_open_counts = (
    select(
        d.topic,
        d.queue_id,
        d.client_id,
        d.state,
        func.count().label("n"),
        func.sum(_visible_now).label("due"),
    )
    .where(d.consumer_group == bindparam("group"), _open)
    .group_by(d.topic, d.queue_id, d.client_id, d.state)
)

_topic_messages = (
    select(messages)
    .where(m.topic == bindparam("topic"))
    .order_by(m.queue_id, m.queue_offset)
    .limit(bindparam("limit"))
)
_dead_by_msg_id = select(messages).where(
    m.msg_id == bindparam("msg_id"), m.topic == bindparam("topic")
)
_waiting = select(messages).where(
    m.topic == names.SCHEDULE_TOPIC, m.released_at.is_(None), m.deliver_at.is_not(None)
)


class ConsumerStore:
    conn: Connection
    _postgres: bool

    @property
    def claims_need_locks(self) -> bool:
        """PostgreSQL may have several brokers writing; SQLite's one writer serializes claims."""
        return self._postgres

    def _insert(self) -> Any:
        return postgresql.insert if self._postgres else sqlite.insert

    # -- groups, subscriptions, members ---------------------------------------------------------

    def get_consumer_group(self, name: str) -> ConsumerGroup | None:
        row = self.conn.execute(_group, {"name": name}).first()
        return _group_record(row._mapping) if row else None

    def create_consumer_group(self, group: ConsumerGroup) -> bool:
        """Insert the group; False if it exists already (another broker created it first)."""
        stmt = (
            self._insert()(consumer_groups)
            .values(
                name=group.name,
                message_model=group.message_model.value,
                consume_from=group.consume_from.value,
                consume_timestamp=group.consume_timestamp,
                max_reconsume_times=group.max_reconsume_times,
                orderly=group.orderly,
                created_at=group.created_at,
            )
            .on_conflict_do_nothing()
        )
        return bool(self.conn.execute(stmt).rowcount == 1)

    def list_subscriptions(self, group: str) -> list[Subscription]:
        result = self.conn.execute(_subscriptions, {"group": group})
        return [Subscription(r.consumer_group, r.topic, r.expression, r.created_at) for r in result]

    def put_subscription(self, subscription: Subscription) -> None:
        stmt = self._insert()(subscriptions).values(
            consumer_group=subscription.consumer_group,
            topic=subscription.topic,
            expression=subscription.expression,
            created_at=subscription.created_at,
        )
        self.conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["consumer_group", "topic"],
                set_={"expression": stmt.excluded.expression},
            )
        )

    def touch_consumer(self, group: str, client_id: str, at: int) -> None:
        stmt = self._insert()(consumers).values(
            consumer_group=group, client_id=client_id, last_seen_at=at
        )
        self.conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["consumer_group", "client_id"],
                set_={"last_seen_at": stmt.excluded.last_seen_at},
            )
        )

    def list_consumers(self, group: str) -> list[Member]:
        result = self.conn.execute(_members, {"group": group})
        return [Member(r.consumer_group, r.client_id, r.last_seen_at) for r in result]

    # -- progress -------------------------------------------------------------------------------

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

    def advance_committed(self, keys: Sequence[tuple[str, str, int, str]], at: int) -> None:
        """Move the committed offset of each (group, topic, queue, client) to its oldest open
        offset (else its pull offset).  PostgreSQL: a row another broker holds right now is left
        to it (it advances the offset itself, or the next ack or receive does); an offset behind
        is safe, it only redelivers."""
        by_member: dict[tuple[str, str], list[tuple[str, int]]] = {}
        for group, topic, queue_id, client in sorted(set(keys)):
            by_member.setdefault((group, client), []).append((topic, queue_id))
        for (group, client), queue_keys in by_member.items():
            if self._postgres:
                topics, queue_ids = (list(column) for column in zip(*queue_keys, strict=True))
                params = {
                    "b_group": group,
                    "b_client": client,
                    "b_topics": topics,
                    "b_queue_ids": queue_ids,
                    "b_at": at,
                }
                _advance_queues_unless_held.rowcount(self.conn, params)
                continue
            params = {"b_group": group, "b_client": client, "b_keys": queue_keys, "b_at": at}
            self.conn.execute(_advance_queues, params)

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
        return [_progress_record(r._mapping) for r in result]

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

    # -- deliveries -----------------------------------------------------------------------------

    def add_deliveries(self, new: Sequence[NewDelivery]) -> None:
        inflight = DeliveryState.INFLIGHT.value
        _insert_deliveries.execute(
            self.conn,
            [
                (
                    n.consumer_group,
                    n.client_id,
                    n.topic,
                    n.queue_id,
                    n.queue_offset,
                    n.msg_id,
                    n.receipt_handle,
                    inflight,
                    n.reconsume_times,
                    n.delivered_at,
                    n.invisible_until,
                )
                for n in new
            ],
        )

    def claim_due_deliveries(
        self, group: str, client_id: str | None, now: int, limit: int
    ) -> list[Delivery]:
        """Open deliveries whose invisibility ran out (or whose orderly retry is due), locked."""
        query = _due_queries[(client_id is not None, self._postgres)]
        params = {"group": group, "now": now, "limit": limit}
        if client_id is not None:
            params["client"] = client_id
        return [_delivery_record(r) for r in query.all(self.conn, params)]

    def next_due_at(self, group: str) -> int | None:
        value = self.conn.execute(_next_due, {"group": group}).scalar()
        return None if value is None else int(value)

    def get_delivery(self, group: str, receipt_handle: str) -> Delivery | None:
        row = self.conn.execute(_by_handle, {"group": group, "handle": receipt_handle}).first()
        return _delivery_record(row._mapping) if row else None

    def finish_deliveries(
        self, group: str, handles: Sequence[str], state: DeliveryState, now: int
    ) -> list[Delivery]:
        """End the in-flight, still invisible deliveries behind ``handles``; the ones it ended."""
        if not handles:
            return []
        params = {
            "b_group": group,
            "b_handles": list(handles),
            "b_state": state.value,
            "b_now": now,
        }
        if self._postgres:
            return [_delivery_record(r) for r in _finish_pg.all(self.conn, params)]
        return [_delivery_record(r._mapping) for r in self.conn.execute(_finish, params)]

    def set_delivery(
        self,
        delivery: Delivery,
        *,
        state: DeliveryState,
        receipt_handle: str | None = None,
        invisible_until: int | None = None,
        finished_at: int | None = None,
    ) -> bool:
        """Move a delivery on from the state it was read in; False if it moved meanwhile."""
        params = {
            "b_id": delivery.id,
            "b_from": delivery.state.value,
            "b_state": state.value,
            "b_handle": receipt_handle or delivery.receipt_handle,
            "b_until": delivery.invisible_until if invisible_until is None else invisible_until,
            "b_finished": finished_at,
        }
        return bool(self.conn.execute(_set_delivery, params).rowcount == 1)

    def expire_queue_deliveries(self, group: str, topic: str, queue_id: int, now: int) -> int:
        params = {"b_group": group, "b_topic": topic, "b_queue": queue_id, "b_now": now}
        return int(self.conn.execute(_expire_queue, params).rowcount)

    def open_delivery_counts(self, group: str, now: int) -> dict[tuple[str, int, str], list[int]]:
        """(topic, queue, client) -> [in flight, retrying] of the group's open deliveries."""
        counts: dict[tuple[str, int, str], list[int]] = {}
        for r in self.conn.execute(_open_counts, {"group": group, "now": now}):
            slot = counts.setdefault((r.topic, r.queue_id, r.client_id), [0, 0])
            if r.state == DeliveryState.RETRYING.value:
                slot[1] += int(r.n)
            else:  # in flight; the ones past their invisibility wait to be handed out again
                slot[0] += int(r.n) - int(r.due or 0)
                slot[1] += int(r.due or 0)
        return counts

    # -- retry and dead letters -----------------------------------------------------------------

    def topic_messages(self, topic: str, limit: int) -> list[StoredMessage]:
        result = self.conn.execute(_topic_messages, {"topic": topic, "limit": limit})
        return [rows.stored_message(r) for r in result]

    def find_in_topic(self, topic: str, msg_id: str) -> list[StoredMessage]:
        result = self.conn.execute(_dead_by_msg_id, {"topic": topic, "msg_id": msg_id})
        return [rows.stored_message(r) for r in result]

    def waiting_retries(self, retry_topic: str) -> list[StoredMessage]:
        """Retry copies of a group still waiting for their time in SCHEDULE_TOPIC_XXXX."""
        query = _waiting.where(m.properties.contains(retry_topic, autoescape=True))
        found = [rows.stored_message(r) for r in self.conn.execute(query)]
        return [msg for msg in found if msg.properties.get("REAL_TOPIC") == retry_topic]

    def add_trace(
        self, msg_id: str, event: str, actor: str, at: int, detail: str | None = None
    ) -> None:
        self.conn.execute(
            insert(trace_events).values(
                msg_id=msg_id, event=event, actor=actor, at=at, detail=detail
            )
        )

    def deliveries_of(self, msg_id: str) -> list[Delivery]:
        query = select(deliveries).where(d.msg_id == msg_id).order_by(d.id)
        return [_delivery_record(r._mapping) for r in self.conn.execute(query)]

    def trace_events_of(self, msg_id: str) -> list[tuple[int, str, str, str | None]]:
        """(at, event, actor, detail JSON) of the message's recorded events, oldest first."""
        t = trace_events.c
        query = select(t.at, t.event, t.actor, t.detail).where(t.msg_id == msg_id).order_by(t.id)
        return [(r.at, r.event, r.actor, r.detail) for r in self.conn.execute(query)]

    def delete_consumer_group(self, group: str) -> None:
        for table, column in (
            (subscriptions, s.consumer_group),
            (consumers, consumers.c.consumer_group),
            (consumer_offsets, o.consumer_group),
            (consumer_groups, g.name),
        ):
            self.conn.execute(delete(table).where(column == group))


def _group_record(r: Any) -> ConsumerGroup:
    return ConsumerGroup(
        name=r["name"],
        message_model=MessageModel(r["message_model"]),
        consume_from=ConsumeFrom(r["consume_from"]),
        consume_timestamp=r["consume_timestamp"],
        max_reconsume_times=r["max_reconsume_times"],
        orderly=bool(r["orderly"]),
        created_at=r["created_at"],
    )


def _progress_record(r: Any) -> QueueProgress:
    return QueueProgress(
        consumer_group=r["consumer_group"],
        topic=r["topic"],
        queue_id=r["queue_id"],
        client_id=r["client_id"],
        committed_offset=r["committed_offset"],
        pulled_offset=r["pulled_offset"],
    )


def _delivery_record(r: Any) -> Delivery:
    return Delivery(
        id=r["id"],
        consumer_group=r["consumer_group"],
        client_id=r["client_id"],
        topic=r["topic"],
        queue_id=r["queue_id"],
        queue_offset=r["queue_offset"],
        msg_id=r["msg_id"],
        receipt_handle=r["receipt_handle"],
        state=DeliveryState(r["state"]),
        reconsume_times=r["reconsume_times"],
        delivered_at=r["delivered_at"],
        invisible_until=r["invisible_until"],
        finished_at=r["finished_at"],
    )


class ConcurrentUnits:
    """PostgreSQL: consumer units of work on their own pooled connections, side by side, instead
    of queueing behind the group-commit writer.

    Claims are row locks taken with ``SKIP LOCKED`` -- exactly what lets several brokers share one
    database -- so receives, acks and nacks of one broker may run in parallel the same way.  A
    receive or change-invisible commits with ``synchronous_commit = off``: losing its lease in a
    database crash only hands the message out again (at least once).  Acks and nacks commit as the
    ``flush`` setting says, like every other write.  Leases and durable units run on two pools
    (``engine.make_claims_engine``), so that neither needs a ``SET LOCAL`` of its own.
    """

    def __init__(
        self,
        leases: Engine,
        durable: Engine,
        *,
        ready: Callable[[], bool],
        inflight: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        """``durable``: the pool of acks and nacks (the leases' own under ``flush: async``);
        ``inflight``: held while a unit runs (the store's, so that closing waits for it)."""
        self.leases = leases
        self.durable = durable
        self.ready = ready
        self.inflight = inflight

    async def run(self, unit: Callable[[Any], T], *, lease_only: bool = False) -> T:
        if not self.ready():
            raise NotReady("the broker is not ready: the store's schema is not current")
        engine = self.leases if lease_only else self.durable
        return await anyio.to_thread.run_sync(self._run, unit, engine, nonces.take())

    def _run(self, unit: Callable[[Any], T], engine: Engine, nonce: NonceKey | None) -> T:
        from broker_service.store.sqltx import SqlTx  # sqltx imports this module

        error: Exception | None = None
        for _ in range(_RETRIES):
            try:
                with self.inflight(), engine.begin() as conn:
                    tx = SqlTx(conn)
                    if nonce is not None and not tx.remember_nonces([nonce])[0]:
                        raise nonces.replayed_error(nonce)
                    result = unit(tx)
                    tx.flush()
                return result
            except BrokerError:
                raise
            except (IntegrityError, OperationalError) as exc:  # a lost race, a deadlock: again
                error = exc
            except DBAPIError as exc:
                raise NotReady(f"the store failed: {exc.orig}", code="STORE_UNAVAILABLE") from exc
        raise NotReady(f"the store failed: {error}", code="STORE_UNAVAILABLE") from error


_RETRIES = 3
