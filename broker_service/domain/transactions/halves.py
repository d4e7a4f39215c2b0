"""Half messages, commit and rollback: RocketMQ's two-phase flow, resolved exactly once.

* ``prepare`` stores the half in ``RMQ_SYS_TRANS_HALF_TOPIC`` (its real topic and queue in its
  properties) and a ``PREPARED`` row in the transactions index.
* ``resolve`` moves the row out of ``PREPARED`` (or ``DISCARDED``) with a conditional update -- the
  store's guarantee that only one decision wins -- and, in the same unit of work, appends the op record
  to ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` and, on commit, the real message to its topic.
* Repeating the decision that won answers the same; the opposite decision is a conflict.

Who decided is read from the row (``resolved_by``, and ``check_client_id``: the instance a check
went to), so a producer's commit writes nothing more.  Rarer decisions leave a trace event in their
unit: an operator's (``OPERATOR_COMMIT``, ``OPERATOR_ROLLBACK``, with the access key), and a pull
instance's answer to a check (``CHECKED``, with the time since it took the check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from broker_service.domain import names
from broker_service.domain.errors import Conflict, InvalidRequest, NotFound, missing
from broker_service.domain.ids import new_id
from broker_service.domain.messages.model import (
    PROP_DECISION,
    PROP_DELAY_LEVEL,
    PROP_DELIVER_AT,
    PROP_PRODUCER_GROUP,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_RESOLVED_BY,
    PROP_TRANSACTION,
    MessageDraft,
    PendingMessage,
    StoredMessage,
)
from broker_service.domain.messages.sending import Sender
from broker_service.domain.ports import (
    Half,
    MessageStore,
    RequestNonce,
    Resolve,
    ResolveOutcome,
    RetentionStore,
    StoreTx,
    TraceStore,
    TransactionEnd,
    nonces,
)
from broker_service.domain.transactions.model import (
    CHECKED,
    PROP_SENT_BY,
    CheckOutcome,
    Decision,
    ResolvedBy,
    TransactionRecord,
    TransactionState,
)

FINAL_STATES = (TransactionState.COMMITTED, TransactionState.ROLLED_BACK)


class HalfReceipt(NamedTuple):
    transaction_id: str
    msg_id: str
    duplicate: bool
    state: TransactionState = TransactionState.PREPARED


class Resolution(NamedTuple):
    """The answer to a commit or rollback (the same for every repeat of the winning decision)."""

    transaction_id: str
    state: TransactionState
    msg_id: str
    topic: str
    queue_id: int
    real_message: StoredMessage | PendingMessage | None = None
    check_latency_ms: int | None = None  # a pull check's answer: since the instance took it

    @property
    def queue_offset(self) -> int | None:
        message = self.real_message
        if message is None or message.topic == names.SCHEDULE_TOPIC:
            return None
        return message.queue_offset


@dataclass(frozen=True, slots=True)
class Resolving:
    """One commit or rollback, as asked: ``decision`` on ``transaction_id``, decided ``by``;
    ``producer_group``: the group the asker says it belongs to (None: any, as for an operator);
    ``may_end``: the caller's own condition on the transaction (the ACL's need on its topic),
    checked once it is read, before the group is compared; it raises a ``DomainError`` to
    refuse.  ``actor``: an operator's access key (ACL on); ``client_id``: the producer
    instance that asks, when it says (kept by the resolving update as the transaction's
    ``resolved_client``, no statement more); ``pull_answer``: a pull instance's answer to its
    check (``from_check`` over REST), traced as its ``CHECKED`` event; ``via``: the protocol
    that answer came by, when not REST (``grpc``), in that event's detail.  The signed
    request's nonce is not part of it: like every use case's, it is the service call's."""

    transaction_id: str
    decision: Decision
    producer_group: str | None
    by: ResolvedBy
    may_end: Callable[[TransactionRecord], None] | None = None
    actor: str | None = None
    client_id: str | None = None
    pull_answer: bool = False
    via: str | None = None


class Transactions:
    def __init__(self, sender: Sender) -> None:
        self.sender = sender

    @property
    def clock(self) -> Callable[[], int]:
        return self.sender.clock

    def prepare(
        self,
        topic_name: str,
        draft: MessageDraft,
        producer_group: str,
        check_immunity_seconds: float | None = None,
        client_id: str | None = None,
        *,
        nonce: RequestNonce | None = None,
    ) -> Half[HalfReceipt]:
        """``client_id``: the producer instance that sends the half, when its transport says
        (a gRPC client's id): kept in the half (``PROP_SENT_BY``), check-back asks it first.
        The command names the half's client-made ``msg_id``, whose earlier send it looks for,
        so that a store may look for those of a whole group commit at once; ``nonce``: the
        signed request's, taken (:func:`~broker_service.domain.ports.nonces.take`) once its
        checks have passed."""
        names.check_name(producer_group, "producer group")
        names.check_user_topic(topic_name)
        self.sender.check_draft(draft)
        if PROP_SENT_BY in draft.properties:
            raise InvalidRequest(
                f"property {PROP_SENT_BY!r} is reserved for the broker", code="RESERVED_PROPERTY"
            )

        def unit(tx: StoreTx) -> HalfReceipt:
            sender = self.sender
            topic = sender.topic_for_send(tx, topic_name)
            content_hash = draft.content_hash(topic.name, producer_group) if draft.msg_id else None
            previous = sender.previous_send(tx, draft, content_hash)
            if previous is not None:
                if previous.transaction_id is None:
                    raise Conflict(
                        f"msg_id {draft.msg_id!r} was already used for a normal message",
                        code="MESSAGE_ID_CONFLICT",
                        msg_id=draft.msg_id,
                    )
                return HalfReceipt(previous.transaction_id, previous.msg_id, duplicate=True)
            now = self.clock()
            real = sender.new_message(topic, draft, content_hash, now)
            transaction_id = new_id()
            properties = dict(real.properties)
            properties.update(
                {
                    PROP_REAL_TOPIC: topic.name,
                    PROP_REAL_QUEUE_ID: str(real.queue_id),
                    PROP_PRODUCER_GROUP: producer_group,
                    PROP_TRANSACTION: "true",
                }
            )
            if client_id:
                properties[PROP_SENT_BY] = client_id
            if draft.delay_level:
                properties[PROP_DELAY_LEVEL] = str(draft.delay_level)
            elif draft.deliver_at is not None:
                properties[PROP_DELIVER_AT] = str(draft.deliver_at)
            half = real.copy_to(
                names.HALF_TOPIC,
                0,
                properties=properties,
                transaction_id=transaction_id,
                producer_group=producer_group,
            )
            tx.append(half)
            immunity_ms = (
                None if check_immunity_seconds is None else int(check_immunity_seconds * 1000)
            )
            tx.insert_transaction(
                TransactionRecord(
                    transaction_id=transaction_id,
                    msg_id=half.msg_id,
                    producer_group=producer_group,
                    topic=topic.name,
                    half_offset=-1,  # filled by the store from the half's offset
                    real_queue_id=real.queue_id,
                    state=TransactionState.PREPARED,
                    check_times=0,
                    created_at=now,
                    check_immunity_ms=immunity_ms,
                    next_check_at=now
                    + (
                        sender.config.transaction_timeout_ms if immunity_ms is None else immunity_ms
                    ),
                ),
                half,
            )
            return HalfReceipt(transaction_id, half.msg_id, duplicate=False)

        return Half(unit, topic_name, draft.msg_id, nonce=nonces.take(nonce))

    def resolve(
        self, resolving: Resolving, *, trace: bool = True, nonce: RequestNonce | None = None
    ) -> Resolve[Resolution]:
        """The command names the transaction it looks up, so that a store may read those of many
        commits at once.  ``trace``: whether a pull instance's answer is traced as ``CHECKED``;
        ``nonce``: the signed request's, taken (:func:`~broker_service.domain.ports.nonces.take`)
        once its checks have passed."""
        transaction_id, decision, by = resolving.transaction_id, resolving.decision, resolving.by
        producer_group, client_id = resolving.producer_group, resolving.client_id

        def unit(tx: StoreTx) -> Resolution:
            found = tx.transaction_with_half(transaction_id)
            if found is None:
                raise unknown_transaction(tx, transaction_id)
            record, half = found
            if resolving.may_end is not None:  # before the group is compared: refusals name nothing
                resolving.may_end(record)
            if producer_group is not None and producer_group != record.producer_group:
                raise Conflict(
                    f"transaction {transaction_id} belongs to producer group "
                    f"{record.producer_group!r}, not {producer_group!r}",
                    code="PRODUCER_GROUP_MISMATCH",
                    transaction_id=transaction_id,
                )
            if record.state in FINAL_STATES:
                return self._answer_repeat(tx, record, decision)
            if decision is Decision.COMMIT and tx.get_topic(record.topic) is None:
                raise NotFound(
                    f"topic {record.topic!r} of transaction {transaction_id} was deleted; "
                    "the half can only be rolled back",
                    code="TOPIC_NOT_FOUND",
                    topic=record.topic,
                    transaction_id=transaction_id,
                )
            if half is None:
                raise NotFound(
                    f"the half message of transaction {transaction_id} is gone",
                    code="HALF_MESSAGE_NOT_FOUND",
                    transaction_id=transaction_id,
                )
            now = self.clock()
            end = TransactionEnd(transaction_id, decision.final_state, now, by, client_id)
            outcome = tx.resolve_transaction(end)
            if outcome is ResolveOutcome.NOT_OPEN:
                # Another broker (or request) won the race since we read: answer as a repeat.
                return self._answer_repeat(tx, self._get(tx, transaction_id), decision)
            tx.append(self._op_record(half, decision, by, now))
            real = self._real_message(half, now) if decision is Decision.COMMIT else None
            if real is not None:
                tx.append(real)
            latency = None
            if by is ResolvedBy.OPERATOR:
                _trace_operator(tx, record, decision, resolving.actor, now)
            elif resolving.pull_answer:
                latency = _trace_pull_answer(tx, record, decision, now, trace, resolving.via)
            return Resolution(
                transaction_id,
                decision.final_state,
                half.msg_id,
                record.topic,
                record.real_queue_id,
                real,
                latency,
            )

        return Resolve(unit, transaction_id, decision, by, client_id, nonce=nonces.take(nonce))

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _get(tx: StoreTx, transaction_id: str) -> TransactionRecord:
        record = tx.get_transaction(transaction_id)
        if record is None:
            raise unknown_transaction(tx, transaction_id)
        return record

    @staticmethod
    def _answer_repeat(
        tx: MessageStore, record: TransactionRecord, decision: Decision
    ) -> Resolution:
        if record.state is not decision.final_state:
            raise Conflict(
                f"transaction {record.transaction_id} is already {record.state.value}; "
                f"it cannot be {decision.final_state.value}",
                code="TRANSACTION_ALREADY_RESOLVED",
                transaction_id=record.transaction_id,
                state=record.state.value,
            )
        real = None
        if decision is Decision.COMMIT:
            real = tx.real_message_of(record.transaction_id, record.topic)
            if real is None:
                real = tx.real_message_of(record.transaction_id, names.SCHEDULE_TOPIC)
        return Resolution(
            record.transaction_id,
            record.state,
            record.msg_id,
            record.topic,
            record.real_queue_id,
            real,
        )

    @staticmethod
    def _op_record(
        half: StoredMessage, decision: Decision, by: ResolvedBy, now: int
    ) -> PendingMessage:
        """RocketMQ's op message: tag ``d``, body = the half's queue offset."""
        return PendingMessage(
            topic=names.OP_HALF_TOPIC,
            queue_id=0,
            msg_id=new_id(),
            body=str(half.queue_offset).encode(),
            encoding="utf-8",
            born_at=now,
            stored_at=now,
            tags="d",
            properties={PROP_DECISION: decision.value, PROP_RESOLVED_BY: by.value},
            transaction_id=half.transaction_id,
            producer_group=half.producer_group,
            origin_id=half.id,
        )

    def _real_message(self, half: StoredMessage, now: int) -> PendingMessage:
        properties = dict(half.properties)
        topic = properties.pop(PROP_REAL_TOPIC)
        queue_id = int(properties.pop(PROP_REAL_QUEUE_ID))
        delay_level = properties.pop(PROP_DELAY_LEVEL, None)
        deliver_at_prop = properties.pop(PROP_DELIVER_AT, None)
        properties.pop(PROP_SENT_BY, None)
        message = half.copy_to(topic, queue_id, stored_at=now, properties=properties)
        # A delay counts from the commit (RocketMQ delivers a delayed transactional message once,
        # its delay after the commit); an absolute deliver_at stays absolute.
        level = int(delay_level) if delay_level else None
        if level:
            deliver_at: int | None = now + self.sender.config.delay_levels_ms[level - 1]
        elif deliver_at_prop is not None and int(deliver_at_prop) > now:
            deliver_at = int(deliver_at_prop)
        else:
            deliver_at = None
        return self.sender.placed(message, deliver_at, level)


def _trace_operator(
    tx: TraceStore, record: TransactionRecord, decision: Decision, actor: str | None, now: int
) -> None:
    """An operator's decision, by its access key: an audit record, whatever the trace setting."""
    detail = {"transaction_id": record.transaction_id, "state": record.state.value}
    event = f"OPERATOR_{decision.value}"
    tx.add_trace(record.msg_id, event, actor or "operator", now, orjson.dumps(detail).decode())


def _trace_pull_answer(
    tx: TraceStore,
    record: TransactionRecord,
    decision: Decision,
    now: int,
    trace: bool,
    via: str | None = None,
) -> int | None:
    """The ``CHECKED`` event of a pull check answered by this commit or rollback; its latency
    runs from when the instance took the check (``last_checked_at``)."""
    taken = record.last_checked_at
    latency = None if taken is None else max(0, now - taken)
    if trace:
        outcome = CheckOutcome("pull", answer=decision.value, latency_ms=latency)
        detail = outcome.detail(record.transaction_id, record.check_times)
        if via is not None:
            detail["via"] = via
        by = record.check_client_id or "check"
        tx.add_trace(record.msg_id, CHECKED, by, now, orjson.dumps(detail).decode())
    return latency


def unknown_transaction(tx: RetentionStore, transaction_id: str) -> NotFound:
    """404: never existed (``TRANSACTION_NOT_FOUND``), or purged by retention
    (``TRANSACTION_EXPIRED``)."""
    purged = tx.purged_at("t", [transaction_id])
    return missing(
        "transaction", transaction_id, "TRANSACTION", purged, transaction_id=transaction_id
    )
