"""A message's trace: what happened to it, from the rows that record it.

Message-side events come from its copies (the half, the real message) and its transaction
(decided -- by the producer instance that committed, the one that answered a check, or an
operator -- and discarded);
consumer-side events from its ``deliveries`` (DELIVERED, ACKED, NACKED) and from the
``trace_events`` the broker writes where no row records the moment (CHECKED, RESUMED, RETRIED,
DEAD, RESENT, orderly NACKED, operator actions), and the clients' own reports (CLIENT_PUB,
CLIENT_SUB: what sending and consuming cost them), recorded by :func:`record_client_trace`.
docs/observability.md, "Message trace", lists every event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from broker_service.domain import names
from broker_service.domain.consumers.model import DeliveryState
from broker_service.domain.errors import DomainError, missing
from broker_service.domain.messages.model import PROP_REAL_TOPIC, StoredMessage
from broker_service.domain.ports import ClientStore, RequestNonce, Store, StoreTx, nonces
from broker_service.domain.transactions.model import PROP_SENT_BY

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


# What decided a transaction comes before the decision it made in the same millisecond.
_CAUSES = frozenset({"CHECKED", "OPERATOR_COMMIT", "OPERATOR_ROLLBACK"})


def _in_order(event: TraceEvent) -> tuple[int, int]:
    return event.at, 0 if event.event in _CAUSES else 1


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
            by, how = record.resolved_by.value, {"resolved_by": record.resolved_by.value}
            if by == "check" and record.check_client_id:
                by = record.check_client_id  # the instance whose answer decided it
            elif by == "producer":
                how["producer_group"] = record.producer_group
                by = record.resolved_client or by  # the instance, when its request named it
            events.append(TraceEvent(record.resolved_at, decided, by, how))
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
        events = _with_protocol(tx, events, copies)
        events.sort(key=_in_order)
        return events

    return unit


# A client's own acts: the one who sent the half, decided it, received or finished a delivery.
_CLIENT_ACTS = frozenset(
    {"HALF_STORED", "COMMITTED", "ROLLED_BACK", "DELIVERED", "ACKED", "NACKED"}
)


def _with_protocol(
    tx: ClientStore, events: list[TraceEvent], copies: Sequence[StoredMessage]
) -> list[TraceEvent]:
    """Each client's act names the protocol it came by: ``via: grpc`` and what the client said
    it is (``client: PYTHON 5.1.2``) for a RocketMQ 5 client, ``via: rest`` for any other.
    The half's event names its sender when the half recorded it."""
    sender = next(
        (c.properties.get(PROP_SENT_BY) for c in copies if PROP_SENT_BY in c.properties), None
    )

    def actor(event: TraceEvent) -> str | None:
        if event.event == "HALF_STORED":
            return sender
        if event.event in ("COMMITTED", "ROLLED_BACK") and event.by in ("producer", "check"):
            return None  # the instance is not known (a request that named none)
        return event.by if event.event in _CLIENT_ACTS else None

    actors = [(e, actor(e)) for e in events]
    known = tx.get_clients(sorted({a for _, a in actors if a}))
    marked = []
    for event, client_id in actors:
        if client_id is None:
            marked.append(event)
            continue
        profile = known.get(client_id)
        detail = dict(event.detail)
        if event.event == "HALF_STORED":
            detail["client_id"] = client_id
        if profile is None:
            detail["via"] = "rest"
        else:
            detail |= {"via": "grpc", "client": profile.agent}
        marked.append(TraceEvent(event.at, event.event, event.by, detail))
    return marked


# -- the clients' own reports ---------------------------------------------------------------------

CLIENT_EVENTS = {"PUB": "CLIENT_PUB", "SUB": "CLIENT_SUB"}


@dataclass(frozen=True, slots=True)
class ClientTraceRecord:
    """One report of a client (the framework): what sending (``PUB``) or consuming (``SUB``) a
    message cost it, and how it ended."""

    msg_id: str
    type: Literal["PUB", "SUB"]
    topic: str
    group: str
    client_id: str
    at: int
    cost_ms: float
    status: str


@dataclass(frozen=True, slots=True)
class ClientTraceRefusal:
    index: int
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class ClientTraceAnswer:
    recorded: int
    refused: list[ClientTraceRefusal]


# (kind "PUB" or "SUB", topic, group): raises a DomainError (Forbidden) when the caller may not.
MayReport = Callable[[str, str, str], None]


def _message_topic_and_group(copies: Sequence[StoredMessage]) -> tuple[str, str | None]:
    """The topic a message was sent to (a half's real topic) and its producer group."""
    group = next((c.producer_group for c in copies if c.producer_group), None)
    for copy in copies:
        if not names.is_system_topic(copy.topic):
            return copy.topic, group
    for copy in copies:
        if PROP_REAL_TOPIC in copy.properties:
            return copy.properties[PROP_REAL_TOPIC], group
    return copies[0].topic, group


def _client_trace_unit(
    records: Sequence[ClientTraceRecord], may_report: MayReport | None
) -> Callable[[StoreTx], ClientTraceAnswer]:
    def unit(tx: StoreTx) -> ClientTraceAnswer:
        rows: list[tuple[str, str, str, int, str]] = []
        refused: list[ClientTraceRefusal] = []
        found = tx.find_messages_of([report.msg_id for report in records])  # one read
        for index, report in enumerate(records):
            try:
                copies = found.get(report.msg_id)
                if not copies:
                    purged = tx.purged_at("m", [report.msg_id])
                    raise missing("message", report.msg_id, "MESSAGE", purged)
                if may_report is not None:
                    topic, producer_group = _message_topic_and_group(copies)
                    group = producer_group if report.type == "PUB" and producer_group else None
                    may_report(report.type, topic, group or report.group)
            except DomainError as error:
                refused.append(ClientTraceRefusal(index, error.code, error.message))
                continue
            detail = {
                "group": report.group,
                "topic": report.topic,
                "cost_ms": report.cost_ms,
                "status": report.status,
            }
            event = CLIENT_EVENTS[report.type]
            rows.append(
                (report.msg_id, event, report.client_id, report.at, orjson.dumps(detail).decode())
            )
        if rows:
            tx.add_traces(rows)
        return ClientTraceAnswer(len(rows), refused)

    return unit


async def record_client_trace(
    store: Store,
    records: Sequence[ClientTraceRecord],
    may_report: MayReport | None,
    *,
    enabled: bool,
    nonce: RequestNonce | None = None,
) -> ClientTraceAnswer:
    """Record the clients' reports as ``CLIENT_PUB`` / ``CLIENT_SUB`` events, each on its own:
    an unknown message, or (``may_report``: the ACL) one the caller could not have sent or
    received, is refused by its index and the others are kept.  With the ``trace`` setting off
    (``enabled`` False) nothing is looked at or kept: ``recorded`` 0."""
    if not enabled:
        return ClientTraceAnswer(0, [])
    return await store.write(_client_trace_unit(records, may_report), nonce=nonces.take(nonce))
