"""A message's trace: what happened to it, from the rows that record it.

Message-side events come from its copies (the half, the real message) and its transaction
(decided, discarded); consumer-side events from its ``deliveries`` (DELIVERED, ACKED, NACKED) and from the
``trace_events`` the broker writes where no row records the moment (RETRIED, DEAD, RESENT, orderly
NACKED, operator actions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from broker_service.domain import names
from broker_service.domain.consumers.model import DeliveryState
from broker_service.domain.errors import missing
from broker_service.domain.messages.model import StoredMessage
from broker_service.domain.ports import StoreTx

_RESOLVED = {"COMMITTED": "COMMITTED", "ROLLED_BACK": "ROLLED_BACK"}
_FINISHED = {DeliveryState.ACKED: "ACKED", DeliveryState.NACKED: "NACKED"}


@dataclass(frozen=True, slots=True)
class TraceEvent:
    at: int
    event: str
    by: str
    detail: dict[str, Any] = field(default_factory=dict)


def _message_events(copy: StoredMessage) -> list[TraceEvent]:
    where = {"topic": copy.topic, "queue_id": copy.queue_id, "queue_offset": copy.queue_offset}
    if copy.topic == names.HALF_TOPIC:
        return [TraceEvent(copy.stored_at, "HALF_STORED", copy.producer_group or "producer", where)]
    if names.is_system_topic(copy.topic) or copy.transaction_id is not None:
        return []  # retry / DLQ / schedule copies have their own events; commits have COMMITTED
    return [TraceEvent(copy.stored_at, "SENT", copy.producer_group or "producer", where)]


def trace(msg_id: str, broker_id: str) -> Callable[[StoreTx], list[TraceEvent]]:
    def unit(tx: StoreTx) -> list[TraceEvent]:
        copies = tx.find_messages(msg_id)
        if not copies:
            purged = tx.purged_at("m", [msg_id])
            raise missing("message", msg_id, "MESSAGE", purged, msg_id=msg_id)
        events = [e for copy in copies for e in _message_events(copy)]
        txid = next((c.transaction_id for c in copies if c.transaction_id), None)
        record = tx.get_transaction(txid) if txid else None
        if record is not None and record.resolved_at is not None and record.resolved_by:
            decided = _RESOLVED.get(record.state.value, record.state.value)
            events.append(TraceEvent(record.resolved_at, decided, record.resolved_by.value, {}))
        if record is not None and record.discarded_at is not None:
            reason = {"reason": record.discard_reason}
            events.append(TraceEvent(record.discarded_at, "DISCARDED", broker_id, reason))
        for delivery in tx.deliveries_of(msg_id):
            detail = {
                "consumer_group": delivery.consumer_group,
                "topic": delivery.topic,
                "queue_id": delivery.queue_id,
                "queue_offset": delivery.queue_offset,
                "reconsume_times": delivery.reconsume_times,
            }
            events.append(
                TraceEvent(delivery.delivered_at, "DELIVERED", delivery.client_id, detail)
            )
            finished = _FINISHED.get(delivery.state)
            if finished is not None and delivery.finished_at is not None:
                group_detail = {"consumer_group": delivery.consumer_group}
                events.append(
                    TraceEvent(delivery.finished_at, finished, delivery.client_id, group_detail)
                )
        for at, event, actor, recorded in tx.trace_events_of(msg_id):
            loaded = orjson.loads(recorded) if recorded else {}
            extra = loaded if isinstance(loaded, dict) else {"value": loaded}
            events.append(TraceEvent(at, event, actor, extra))
        events.sort(key=lambda e: e.at)
        return events

    return unit
