"""The transactions part of ``MemoryTx``: the index of half messages and their one decision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker_service.domain import names
from broker_service.domain.messages.model import PendingMessage, StoredMessage
from broker_service.domain.ports import ResolveOutcome, TransactionEnd, TransactionQuery
from broker_service.domain.transactions.model import (
    TransactionRecord,
    TransactionState,
)
from broker_service.memstore.messages import MessagePart
from broker_service.memstore.state import TxRow

# The states a check-back round, a check or a decision may still move a transaction out of.
OPEN = (TransactionState.PREPARED, TransactionState.DISCARDED)


# What a transaction out of the check-back holds (the SQL store's statements.OUT_OF_CHECKS).
OUT_OF_CHECKS: dict[str, Any] = {"next_check_at": None, "check_pending_pull": False}


class TransactionPart(MessagePart):
    def open_row(self, transaction_id: str) -> TxRow | None:
        row = self.s.transactions.get(transaction_id)
        return row if row is not None and row.record.state in OPEN else None

    def set_row(self, row: TxRow) -> None:
        self.put(self.s.transactions, row.record.transaction_id, row)

    def unclaim(self, row: TxRow, **changes: Any) -> None:
        """Store ``row`` with its record's ``changes`` (fields), its check claim released."""
        record = row.record._replace(**changes)
        self.set_row(row._replace(record=record, claimed_by=None, claimed_until=None))

    def first_transactions(
        self,
        keep: Callable[[TransactionRecord], bool],
        order: Callable[[TransactionRecord], Any],
        limit: int,
    ) -> list[TransactionRecord]:
        """The transactions ``keep`` keeps, in ``order`` (ties: as they were inserted), at most
        ``limit``: the SQL store's ``ORDER BY ... LIMIT``."""
        rows = self.s.transactions.values()
        found = sorted(
            (row for row in rows if keep(row.record)), key=lambda r: (order(r.record), r.seq)
        )
        return [row.record for row in found[:limit]]

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

    def list_transactions(self, query: TransactionQuery) -> list[TransactionRecord]:
        state, group, before = query.state, query.producer_group, query.created_before

        def keep(record: TransactionRecord) -> bool:
            return (
                (state is None or record.state == state)
                and (group is None or record.producer_group == group)
                and (before is None or record.created_at <= before)
            )

        return self.first_transactions(keep, lambda record: record.created_at, query.limit)

    def resolve_transaction(self, end: TransactionEnd) -> ResolveOutcome:
        """The one conditional update: only a transaction still open moves (units run one at a
        time, so the outcome is never deferred)."""
        row = self.open_row(end.transaction_id)
        if row is None:
            return ResolveOutcome.NOT_OPEN
        resolved = {"resolved_at": end.at, "resolved_by": end.by, "resolved_client": end.client}
        self.unclaim(row, state=end.state, **resolved, **OUT_OF_CHECKS)
        return ResolveOutcome.RESOLVED
