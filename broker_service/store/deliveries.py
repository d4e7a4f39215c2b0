"""The delivery part of ``SqlTx``: the leases behind receipt handles (handed out, due again, ended,
renewed), the retry copies and dead letters a group has, and the trace of what happened to a
message.  Due deliveries are claimed with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL (see
``store/progress.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import String, any_, bindparam, case, func, insert, select, text, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ColumnElement

from broker_service.domain import names
from broker_service.domain.consumers.model import (
    OPEN_STATES,
    Delivery,
    DeliveryState,
    NewDelivery,
)
from broker_service.domain.messages.model import StoredMessage
from broker_service.domain.transactions.model import CHECKED
from broker_service.store import rows
from broker_service.store.bulk import BulkInsert
from broker_service.store.fastpath import Prepared
from broker_service.store.part import SqlPart
from broker_service.store.schema import OPEN_DELIVERY, deliveries, messages, trace_events

d = deliveries.c
m = messages.c

# The partial indexes' own predicate, literal: only then do the planners use those indexes.
OPEN = text(f"deliveries.{OPEN_DELIVERY}")
assert OPEN_STATES == ("INFLIGHT", "RETRYING")  # the states that literal names
_TEXTS = postgresql.ARRAY(String)  # PostgreSQL's array where SQLite takes an expanding IN


def group_queue(c: Any) -> tuple[ColumnElement[bool], ...]:
    """A group's rows of one queue (its deliveries, its progress): ``consumer_group``, ``topic``
    and ``queue_id`` bound as ``b_group``, ``b_topic`` and ``b_queue``."""
    return (
        c.consumer_group == bindparam("b_group"),
        c.topic == bindparam("b_topic"),
        c.queue_id == bindparam("b_queue"),
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
    .where(d.consumer_group == bindparam("group"), OPEN, d.invisible_until <= bindparam("now"))
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
_next_due = select(func.min(d.invisible_until)).where(d.consumer_group == bindparam("group"), OPEN)

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
    .where(*group_queue(d), OPEN)
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
    .where(d.consumer_group == bindparam("group"), OPEN)
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

# A half no live instance answers gets a CHECKED event every check round (every 30 s by
# default): 5,760 in two days.  They are all kept, but a message's trace and a transaction's
# check audit read only the newest of them (``trace_event_count`` says how many there are).
CHECKED_READ_MAX = 200
t = trace_events.c
_trace_columns = (t.id, t.at, t.event, t.actor, t.detail)
_other_events = select(*_trace_columns).where(t.msg_id == bindparam("msg_id"), t.event != CHECKED)
_newest_checks = (
    select(*_trace_columns)
    .where(t.msg_id == bindparam("msg_id"), t.event == CHECKED)
    .order_by(t.id.desc())
    .limit(CHECKED_READ_MAX)
)
_event_count = select(func.count()).where(
    t.msg_id == bindparam("msg_id"), t.event == bindparam("event")
)


class DeliveryPart(SqlPart):
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
        return [rows.delivery(r) for r in query.all(self.conn, params)]

    def next_due_at(self, group: str) -> int | None:
        value = self.conn.execute(_next_due, {"group": group}).scalar()
        return None if value is None else int(value)

    def get_delivery(self, group: str, receipt_handle: str) -> Delivery | None:
        row = self.conn.execute(_by_handle, {"group": group, "handle": receipt_handle}).first()
        return rows.delivery(row._mapping) if row else None

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
            return [rows.delivery(r) for r in _finish_pg.all(self.conn, params)]
        return [rows.delivery(r._mapping) for r in self.conn.execute(_finish, params)]

    def set_delivery(self, delivery: Delivery, moved: Delivery) -> bool:
        """Move a delivery on from the state it was read in; False if it moved meanwhile."""
        params = {
            "b_id": delivery.id,
            "b_from": delivery.state.value,
            "b_state": moved.state.value,
            "b_handle": moved.receipt_handle,
            "b_until": moved.invisible_until,
            "b_finished": moved.finished_at,
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

    def add_traces(self, events: Sequence[tuple[str, str, str, int, str | None]]) -> None:
        values = [
            {"msg_id": msg_id, "event": event, "actor": actor, "at": at, "detail": detail}
            for msg_id, event, actor, at, detail in events
        ]
        self.conn.execute(insert(trace_events), values)

    def deliveries_of(self, msg_id: str) -> list[Delivery]:
        query = select(deliveries).where(d.msg_id == msg_id).order_by(d.id)
        return [rows.delivery(r._mapping) for r in self.conn.execute(query)]

    def trace_events_of(self, msg_id: str) -> list[tuple[int, str, str, str | None]]:
        """(at, event, actor, detail JSON) of the message's recorded events, oldest first: every
        event, but of its ``CHECKED`` events only the newest ``CHECKED_READ_MAX``."""
        found = [
            *self.conn.execute(_other_events, {"msg_id": msg_id}),
            *self.conn.execute(_newest_checks, {"msg_id": msg_id}),
        ]
        found.sort(key=lambda r: r.id)
        return [(r.at, r.event, r.actor, r.detail) for r in found]

    def trace_event_count(self, msg_id: str, event: str) -> int:
        """How many ``event`` events the message has recorded (all of them, read or not)."""
        return int(self.conn.execute(_event_count, {"msg_id": msg_id, "event": event}).scalar_one())
