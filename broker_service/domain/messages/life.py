"""Where a message is in its life: its copies in every topic (the half, the real message, a
parked or retried copy) and its transaction, if it has one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker_service.domain import names
from broker_service.domain.errors import missing
from broker_service.domain.messages.model import StoredMessage
from broker_service.domain.ports import StoreTx
from broker_service.domain.transactions.model import TransactionRecord, TransactionState

_STAGES = {
    TransactionState.PREPARED: "HALF",
    TransactionState.DISCARDED: "DISCARDED",
    TransactionState.ROLLED_BACK: "ROLLED_BACK",
    TransactionState.COMMITTED: "COMMITTED",
}


@dataclass(frozen=True, slots=True)
class MessageLife:
    """A message and where it is in its life: the copies of it in every topic and its transaction."""

    message: StoredMessage
    copies: list[StoredMessage]
    transaction: TransactionRecord | None
    stage: str


def message_life(msg_id: str) -> Callable[[StoreTx], MessageLife]:
    def unit(tx: StoreTx) -> MessageLife:
        copies = tx.find_messages(msg_id)
        if not copies:
            purged = tx.purged_at("m", [msg_id])
            raise missing("message", msg_id, "MESSAGE", purged, msg_id=msg_id)
        transaction = None
        txid = next((m.transaction_id for m in copies if m.transaction_id), None)
        if txid is not None:
            transaction = tx.get_transaction(txid)
        return _life(copies, transaction)

    return unit


def _life(copies: list[StoredMessage], transaction: TransactionRecord | None) -> MessageLife:
    user = [m for m in copies if not names.is_system_topic(m.topic)]
    scheduled = [m for m in copies if m.topic == names.SCHEDULE_TOPIC and m.released_at is None]
    if user:
        stage, message = "STORED", user[0]
    elif scheduled:
        stage, message = "SCHEDULED", scheduled[0]
    elif transaction is not None:
        stage = _STAGES[transaction.state]
        message = next(m for m in copies if m.topic == names.HALF_TOPIC)
    else:
        stage, message = "STORED", copies[0]
    return MessageLife(message, copies, transaction, stage)
