"""The check-back part of ``MemoryTx``: producer heartbeats, due halves, the claims and
assignments of checks, pull pickup.  A claim is the half's ``next_check_at`` moved past the
check's time-out, with the broker that holds it, as in the SQL store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from broker_service.domain.ports.checks import CheckAssignment, CheckClaim
from broker_service.domain.transactions.model import (
    ProducerInstance,
    TransactionRecord,
    TransactionState,
)
from broker_service.memstore.transactions import OUT_OF_CHECKS, TransactionPart

PREPARED, DISCARDED = TransactionState.PREPARED, TransactionState.DISCARDED


class CheckPart(TransactionPart):
    # -- producer instances ---------------------------------------------------------------------

    def heartbeat(self, instance: ProducerInstance) -> None:
        key = (instance.producer_group, instance.client_id)
        known = self.s.producers.get(key)
        if known is not None:
            # A new callback URL is a new address: try it at once.
            same_url = known.callback_url == instance.callback_url
            instance = replace(
                instance,
                unreachable_until=known.unreachable_until if same_url else None,
                last_error=known.last_error,
                last_error_at=known.last_error_at,
            )
        self.put(self.s.producers, key, instance)

    def live_producers(self, group: str, since: int) -> list[ProducerInstance]:
        return [p for p in self.list_producers(group) if p.last_heartbeat_at >= since]

    def list_producers(self, group: str) -> list[ProducerInstance]:
        return [p for (g, _), p in sorted(self.s.producers.items()) if g == group]

    def delete_producer_group(self, group: str) -> int:
        gone = [key for key in self.s.producers if key[0] == group]
        for key in gone:
            self.drop(self.s.producers, key)
        return len(gone)

    def mark_unreachable(
        self, group: str, client_id: str, *, until: int, error: str, now: int
    ) -> None:
        known = self.s.producers.get((group, client_id))
        if known is not None:
            changed = replace(known, unreachable_until=until, last_error=error, last_error_at=now)
            self.put(self.s.producers, (group, client_id), changed)

    def mark_reachable(self, group: str, client_id: str) -> None:
        known = self.s.producers.get((group, client_id))
        if known is not None and known.unreachable_until is not None:
            self.put(self.s.producers, (group, client_id), replace(known, unreachable_until=None))

    # -- rounds ---------------------------------------------------------------------------------

    def claim_due_transactions(self, now: int, limit: int) -> list[TransactionRecord]:
        # next_check_at is set only while a half is open: no state condition needed.
        def due(record: TransactionRecord) -> bool:
            return record.next_check_at is not None and record.next_check_at <= now

        return self.first_transactions(due, lambda record: record.next_check_at, limit)

    def assign_check(self, assignment: CheckAssignment) -> None:
        row = self.open_row(assignment.transaction_id)
        if row is None:
            return
        claim = assignment.claim
        record = row.record._replace(
            check_client_id=assignment.client_id,
            check_pending_pull=assignment.pending_pull,
            next_check_at=claim.until,
        )
        self.set_row(
            row._replace(record=record, claimed_by=claim.claimed_by, claimed_until=claim.until)
        )

    def count_check(self, transaction_id: str, now: int, error: str | None) -> None:
        row = self.open_row(transaction_id)
        if row is None:
            return
        record = row.record._replace(
            check_times=row.record.check_times + 1,
            last_checked_at=now,
            undelivered_since=None,
            last_check_error=error,
            last_check_error_at=now if error else None,
        )
        self.set_row(row._replace(record=record))

    def note_undelivered(self, transaction_id: str, error: str, now: int) -> int | None:
        row = self.open_row(transaction_id)
        if row is None:
            return None
        since = row.record.undelivered_since
        since = now if since is None else since
        record = row.record._replace(
            last_check_error=error, last_check_error_at=now, undelivered_since=since
        )
        self.set_row(row._replace(record=record))
        return since

    def check_claim(self, transaction_id: str) -> tuple[str | None, int | None]:
        row = self.s.transactions.get(transaction_id)
        return (None, None) if row is None else (row.claimed_by, row.claimed_until)

    def holds_claim(self, transaction_id: str, claim: CheckClaim, now: int) -> bool:
        row = self.open_row(transaction_id)
        return row is not None and claim.held(row.claimed_by, row.claimed_until, now)

    def schedule_check(self, transaction_id: str, at: int) -> None:
        row = self.open_row(transaction_id)
        if row is None:
            return
        self.unclaim(row, next_check_at=at, check_pending_pull=False)

    def discard_transaction(self, transaction_id: str, at: int, reason: str) -> bool:
        row = self.s.transactions.get(transaction_id)
        if row is None or row.record.state != PREPARED:
            return False
        self.unclaim(row, state=DISCARDED, discarded_at=at, discard_reason=reason, **OUT_OF_CHECKS)
        return True

    def finish_check(self, transaction_id: str, next_check_at: int) -> None:
        """After an UNKNOWN answer: a PREPARED half comes due again; a DISCARDED one stays
        parked."""
        row = self.s.transactions.get(transaction_id)
        if row is None or row.record.state not in (PREPARED, DISCARDED):
            return
        due = next_check_at if row.record.state == PREPARED else None
        self.unclaim(row, next_check_at=due)

    def force_check(self, transaction_id: str, now: int) -> None:
        row = self.open_row(transaction_id)
        if row is None:
            return
        record = row.record._replace(next_check_at=now, check_pending_pull=False)
        self.set_row(row._replace(record=record, claimed_by=None))  # claimed_until stays

    # -- pull mode ------------------------------------------------------------------------------

    def pending_pull_checks(
        self, group: str, client_id: str, limit: int
    ) -> list[TransactionRecord]:
        def pending(record: TransactionRecord) -> bool:
            return (
                record.producer_group == group
                and record.check_client_id == client_id
                and record.check_pending_pull
                and record.state in (PREPARED, DISCARDED)
            )

        return self.first_transactions(pending, lambda r: _nulls_first(r.next_check_at), limit)

    def mark_pulled(self, transaction_id: str, now: int, next_check_at: int) -> None:
        row = self.s.transactions.get(transaction_id)
        if row is None or not row.record.check_pending_pull:
            return
        record = row.record._replace(
            check_pending_pull=False,
            check_times=row.record.check_times + 1,
            last_checked_at=now,
            undelivered_since=None,
            next_check_at=next_check_at,
        )
        self.set_row(row._replace(record=record, claimed_until=next_check_at))

    # -- what is pending ------------------------------------------------------------------------

    def undelivered_halves(self, before: int) -> int:
        return sum(
            1
            for row in self.s.transactions.values()
            if row.record.undelivered_since is not None
            and row.record.undelivered_since <= before
            and row.record.state in (PREPARED, DISCARDED)
        )

    def pending_by_age(self, now: int, ages_ms: Sequence[int]) -> dict[int, int]:
        prepared = [
            row.record.created_at
            for row in self.s.transactions.values()
            if row.record.state == PREPARED
        ]
        return {age: sum(1 for at in prepared if at <= now - age) for age in ages_ms}


def _nulls_first(value: int | None) -> tuple[bool, int]:
    """SQLite's ascending order: NULL before every number."""
    return (value is not None, value or 0)
