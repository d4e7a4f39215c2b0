"""The delivery part of ``MemoryTx``: the leases behind receipt handles (handed out, due again,
ended, renewed), the retry copies and dead letters a group has, and the trace of what happened to
a message."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace

from broker_service.domain import names
from broker_service.domain.consumers.model import (
    OPEN_STATES,
    Delivery,
    DeliveryState,
    NewDelivery,
)
from broker_service.domain.messages.model import PROP_REAL_TOPIC, StoredMessage
from broker_service.domain.transactions.model import CHECKED
from broker_service.memstore.messages import MessagePart
from broker_service.memstore.state import TraceRow

# A message's trace reads only the newest of its CHECKED events (one a round for a half no
# instance answers), as the SQL store does; trace_event_count says how many there are.
CHECKED_READ_MAX = 200


class DeliveryPart(MessagePart):
    def set_delivery_row(self, delivery: Delivery) -> None:
        """Store the row, keeping the index of open deliveries in step with its state."""
        self.put(self.s.deliveries, delivery.id, delivery)
        if delivery.state in OPEN_STATES:
            if delivery.id not in self.s.open_deliveries:
                self.put(self.s.open_deliveries, delivery.id, delivery.consumer_group)
        else:
            self.drop(self.s.open_deliveries, delivery.id)

    def open_of(self, group: str) -> Iterator[Delivery]:
        """The group's open deliveries (in flight, or an orderly retry waiting), by id."""
        for delivery_id in sorted(self.s.open_deliveries):
            if self.s.open_deliveries[delivery_id] == group:
                yield self.s.deliveries[delivery_id]

    def add_deliveries(self, new: Sequence[NewDelivery]) -> None:
        for n in new:
            if n.receipt_handle in self.s.by_handle:
                raise ValueError(f"receipt handle {n.receipt_handle!r} is stored already")
            # A new delivery's fields, in flight under the next id.
            delivery = Delivery(
                self.s.next_id("deliveries"), state=DeliveryState.INFLIGHT, **asdict(n)
            )
            self.put(self.s.by_handle, n.receipt_handle, delivery.id)
            self.set_delivery_row(delivery)

    def claim_due_deliveries(
        self, group: str, client_id: str | None, now: int, limit: int
    ) -> list[Delivery]:
        """Open deliveries whose invisibility ran out (or whose orderly retry is due)."""
        due = [
            d
            for d in self.open_of(group)
            if d.invisible_until <= now and (client_id is None or d.client_id == client_id)
        ]
        due.sort(key=lambda d: (d.invisible_until, d.id))
        return due[:limit]

    def next_due_at(self, group: str) -> int | None:
        return min((d.invisible_until for d in self.open_of(group)), default=None)

    def get_delivery(self, group: str, receipt_handle: str) -> Delivery | None:
        delivery_id = self.s.by_handle.get(receipt_handle)
        if delivery_id is None:
            return None
        delivery = self.s.deliveries.get(delivery_id)
        return delivery if delivery is not None and delivery.consumer_group == group else None

    def finish_deliveries(
        self, group: str, handles: Sequence[str], state: DeliveryState, now: int
    ) -> list[Delivery]:
        """End the in-flight, still invisible deliveries behind ``handles``; the ones it ended."""
        ended = []
        for handle in dict.fromkeys(handles):
            delivery = self.get_delivery(group, handle)
            if (
                delivery is None
                or delivery.state != DeliveryState.INFLIGHT
                or delivery.invisible_until <= now
            ):
                continue
            done = replace(delivery, state=state, finished_at=now)
            self.set_delivery_row(done)
            ended.append(done)
        return sorted(ended, key=lambda d: d.id)

    def set_delivery(self, delivery: Delivery, moved: Delivery) -> bool:
        """Move a delivery on from the state it was read in; False if it moved meanwhile."""
        stored = self.s.deliveries.get(delivery.id)
        if stored is None or stored.state != delivery.state:
            return False
        handle = moved.receipt_handle
        if handle != stored.receipt_handle:
            if handle in self.s.by_handle:
                raise ValueError(f"receipt handle {handle!r} is stored already")
            self.drop(self.s.by_handle, stored.receipt_handle)
            self.put(self.s.by_handle, handle, stored.id)
        self.set_delivery_row(
            replace(
                stored,
                state=moved.state,
                receipt_handle=handle,
                invisible_until=moved.invisible_until,
                finished_at=moved.finished_at,
            )
        )
        return True

    def expire_queue_deliveries(self, group: str, topic: str, queue_id: int, now: int) -> int:
        expired = [d for d in self.open_of(group) if (d.topic, d.queue_id) == (topic, queue_id)]
        for d in expired:
            self.set_delivery_row(d.ended(DeliveryState.EXPIRED, now))
        return len(expired)

    def open_delivery_counts(self, group: str, now: int) -> dict[tuple[str, int, str], list[int]]:
        """(topic, queue, client) -> [in flight, retrying] of the group's open deliveries; an
        in-flight one past its invisibility waits to be handed out again: retrying."""
        counts: dict[tuple[str, int, str], list[int]] = {}
        for d in self.open_of(group):
            slot = counts.setdefault((d.topic, d.queue_id, d.client_id), [0, 0])
            waiting = d.state == DeliveryState.RETRYING or d.invisible_until <= now
            slot[1 if waiting else 0] += 1
        return counts

    def deliveries_of(self, msg_id: str) -> list[Delivery]:
        return [d for _, d in sorted(self.s.deliveries.items()) if d.msg_id == msg_id]

    # -- retry copies and dead letters ----------------------------------------------------------

    def topic_messages(self, topic: str, limit: int) -> list[StoredMessage]:
        found = [m for m in self.s.messages.values() if m.topic == topic]
        found.sort(key=lambda m: (m.queue_id, m.queue_offset))
        return found[:limit]

    def find_in_topic(self, topic: str, msg_id: str) -> list[StoredMessage]:
        return [m for m in self.find_messages(msg_id) if m.topic == topic]

    def waiting_retries(self, retry_topic: str) -> list[StoredMessage]:
        """Retry copies of a group still waiting for their time in SCHEDULE_TOPIC_XXXX."""
        return [
            m
            for _, m in sorted(self.s.messages.items())
            if m.topic == names.SCHEDULE_TOPIC
            and m.released_at is None
            and m.deliver_at is not None
            and m.properties.get(PROP_REAL_TOPIC) == retry_topic
        ]

    # -- the trace ------------------------------------------------------------------------------

    def add_trace(
        self, msg_id: str, event: str, actor: str, at: int, detail: str | None = None
    ) -> None:
        event_id = self.s.next_id("trace_events")
        self.put(self.s.trace, event_id, TraceRow(msg_id, at, event, actor, detail))
        self.add_to(self.s.trace_by_msg_id, msg_id, event_id)

    def add_traces(self, events: Sequence[tuple[str, str, str, int, str | None]]) -> None:
        for msg_id, event, actor, at, detail in events:
            self.add_trace(msg_id, event, actor, at, detail)

    def _events_of(self, msg_id: str) -> list[tuple[int, TraceRow]]:
        return [(i, self.s.trace[i]) for i in sorted(self.s.trace_by_msg_id.get(msg_id, ()))]

    def trace_events_of(self, msg_id: str) -> list[tuple[int, str, str, str | None]]:
        """(at, event, actor, detail JSON) of the message's events, oldest first: every event,
        but of its ``CHECKED`` events only the newest ``CHECKED_READ_MAX``."""
        events = self._events_of(msg_id)
        checks = [i for i, row in events if row.event == CHECKED][-CHECKED_READ_MAX:]
        kept = set(checks)
        return [
            (row.at, row.event, row.actor, row.detail)
            for i, row in events
            if row.event != CHECKED or i in kept
        ]

    def trace_event_count(self, msg_id: str, event: str) -> int:
        return sum(1 for _, row in self._events_of(msg_id) if row.event == event)
