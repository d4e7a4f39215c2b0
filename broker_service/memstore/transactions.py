"""The transactions part of ``MemoryTx``: the index of half messages and their one decision."""

from __future__ import annotations

from broker_service.domain import names
from broker_service.domain.messages.model import PendingMessage, StoredMessage
from broker_service.domain.ports import ResolveOutcome
from broker_service.domain.transactions.model import (
    ResolvedBy,
    TransactionRecord,
    TransactionState,
)
from broker_service.memstore.messages import MessagePart
from broker_service.memstore.state import TxRow

# The states a check-back round, a check or a decision may still move a transaction out of.
OPEN = (TransactionState.PREPARED, TransactionState.DISCARDED)


class TransactionPart(MessagePart):
    def open_row(self, transaction_id: str) -> TxRow | None:
        row = self.s.transactions.get(transaction_id)
        return row if row is not None and row.record.state in OPEN else None

    def set_row(self, row: TxRow) -> None:
        self.put(self.s.transactions, row.record.transaction_id, row)

    def insert_transaction(self, record: TransactionRecord, half: PendingMessage) -> None:
        if record.transaction_id in self.s.transactions:
            raise ValueError(f"transaction {record.transaction_id!r} is stored already")
        # The columns a new transaction is inserted with; the others start empty.
        stored = TransactionRecord(
            record.transaction_id,
            record.msg_id,
            record.producer_group,
            record.topic,
            half.queue_offset,
            record.real_queue_id,
            record.state,
            record.check_times,
            record.created_at,
            check_immunity_ms=record.check_immunity_ms,
            next_check_at=record.next_check_at,
        )
        self.set_row(TxRow(self.s.next_id("transactions"), stored))

    def get_transaction(self, transaction_id: str) -> TransactionRecord | None:
        row = self.s.transactions.get(transaction_id)
        return None if row is None else row.record

    def transaction_with_half(
        self, transaction_id: str
    ) -> tuple[TransactionRecord, StoredMessage | None] | None:
        row = self.s.transactions.get(transaction_id)
        if row is None:
            return None
        half = self.get_message_at(names.HALF_TOPIC, 0, row.record.half_offset)
        return row.record, half

    def list_transactions(
        self,
        state: TransactionState | None,
        producer_group: str | None,
        created_before: int | None,
        limit: int,
    ) -> list[TransactionRecord]:
        found = [
            row
            for row in self.s.transactions.values()
            if (state is None or row.record.state == state)
            and (producer_group is None or row.record.producer_group == producer_group)
            and (created_before is None or row.record.created_at <= created_before)
        ]
        found.sort(key=lambda row: (row.record.created_at, row.seq))
        return [row.record for row in found[:limit]]

    def resolve_transaction(
        self,
        transaction_id: str,
        state: TransactionState,
        at: int,
        by: ResolvedBy,
        client: str | None = None,
    ) -> ResolveOutcome:
        """The one conditional update: only a transaction still open moves (units run one at a
        time, so the outcome is never deferred)."""
        row = self.open_row(transaction_id)
        if row is None:
            return ResolveOutcome.NOT_OPEN
        record = row.record._replace(
            state=state,
            resolved_at=at,
            resolved_by=by,
            resolved_client=client,
            next_check_at=None,
            check_pending_pull=False,
        )
        self.set_row(row._replace(record=record, claimed_by=None, claimed_until=None))
        return ResolveOutcome.RESOLVED
