"""The check-back part of ``SqlTx``: producer heartbeats, claiming due halves, assigning checks,
pull pickup.

Claims live in the database.  A due half is claimed by moving its ``next_check_at`` past the check's
time-out in the same transaction that selected it (``FOR UPDATE SKIP LOCKED`` on PostgreSQL), so no
other broker sees it due while its check is in flight.  Every lookup is by index: due halves through
``next_check_at``, pull checks through ``(producer_group, check_client_id)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, case, delete, func, select, update

from broker_service.domain.ports.checks import CheckAssignment, CheckClaim
from broker_service.domain.transactions.model import ProducerInstance, TransactionRecord
from broker_service.store import rows
from broker_service.store.part import SqlPart
from broker_service.store.schema import producers, transactions
from broker_service.store.statements import OPEN_STATES as _OPEN
from broker_service.store.statements import OUT_OF_CHECKS

t = transactions.c

# ``next_check_at`` is set only while a half is open (PREPARED, or DISCARDED and forced by an
# operator); every way out of those states clears it.  So this lookup needs no state condition --
# with one, SQLite (which keeps no statistics) would walk the state index and sort every pending half.
_due = (
    select(transactions)
    .where(t.next_check_at <= bindparam("now"))
    .order_by(t.next_check_at)
    .limit(bindparam("limit"))
)
_due_locked = _due.with_for_update(skip_locked=True)

_live_producers = select(producers).where(
    producers.c.producer_group == bindparam("group"),
    producers.c.last_heartbeat_at >= bindparam("since"),
)

# An open half, by its id: the updates of its checks.
_update_open = update(transactions).where(t.transaction_id == bindparam("b_id"), t.state.in_(_OPEN))
# A check counted: one more, now, and reaching its instance.
_COUNTED = {
    "check_times": t.check_times + 1,
    "last_checked_at": bindparam("b_now"),
    "undelivered_since": None,
}

# A claimed check goes to an instance; nothing is counted until the instance has it.
_assign = _update_open.values(
    check_client_id=bindparam("b_client"),
    check_pending_pull=bindparam("b_pull"),
    next_check_at=bindparam("b_until"),
    claimed_until=bindparam("b_until"),
    claimed_by=bindparam("b_by"),
)

# A push check reached its instance (an answer, an error status, a time-out after sending).
_count = _update_open.values(
    **_COUNTED,
    last_check_error=bindparam("b_error"),
    last_check_error_at=bindparam("b_error_at"),
)

# A check that reached nobody: remembered and reported, not counted.
_undelivered = _update_open.values(
    last_check_error=bindparam("b_error"),
    last_check_error_at=bindparam("b_now"),
    undelivered_since=func.coalesce(t.undelivered_since, bindparam("b_now")),
).returning(t.undelivered_since)

_update_instance = update(producers).where(
    producers.c.producer_group == bindparam("b_group"),
    producers.c.client_id == bindparam("b_client"),
)
_reachable = _update_instance.where(producers.c.unreachable_until.is_not(None)).values(
    unreachable_until=None
)
_unreachable = _update_instance.values(
    unreachable_until=bindparam("b_until"),
    last_error=bindparam("b_error"),
    last_error_at=bindparam("b_now"),
)

_undelivered_before = (
    select(func.count())
    .select_from(transactions)
    .where(t.undelivered_since <= bindparam("before"), t.state.in_(_OPEN))
)

# The half's next check at ``b_at``: unclaimed, no pull pending.
_schedule = _update_open.values({**OUT_OF_CHECKS, "next_check_at": bindparam("b_at")})

_discard = (
    update(transactions)
    .where(t.transaction_id == bindparam("b_id"), t.state == "PREPARED")
    .values(
        state="DISCARDED",
        discarded_at=bindparam("b_at"),
        discard_reason=bindparam("b_reason"),
        **OUT_OF_CHECKS,
    )
)

_pending_pull = (
    select(transactions)
    .where(
        t.producer_group == bindparam("group"),
        t.check_client_id == bindparam("client"),
        t.check_pending_pull.is_(True),
        t.state.in_(_OPEN),
    )
    .order_by(t.next_check_at)
    .limit(bindparam("limit"))
)
_pending_pull_locked = _pending_pull.with_for_update(skip_locked=True)

_mark_pulled = (
    update(transactions)
    .where(t.transaction_id == bindparam("b_id"), t.check_pending_pull.is_(True))
    .values(
        **_COUNTED,
        check_pending_pull=False,
        next_check_at=bindparam("b_next"),
        claimed_until=bindparam("b_next"),
    )
)

# After an UNKNOWN answer: PREPARED halves come due again; a DISCARDED one stays parked.
_finish_prepared = (
    update(transactions)
    .where(t.transaction_id == bindparam("b_id"), t.state == "PREPARED")
    .values(next_check_at=bindparam("b_next"), claimed_by=None, claimed_until=None)
)
_finish_discarded = (
    update(transactions)
    .where(t.transaction_id == bindparam("b_id"), t.state == "DISCARDED")
    .values(next_check_at=None, claimed_by=None, claimed_until=None)
)

_force = _update_open.values(
    next_check_at=bindparam("b_now"), check_pending_pull=False, claimed_by=None
)

_claim_of = select(t.claimed_by, t.claimed_until).where(t.transaction_id == bindparam("id"))
# Locked on PostgreSQL: no other broker's round claims the half (SKIP LOCKED) between this look and
# the writes it allows, in the same transaction.
_claim_held = select(t.claimed_by, t.claimed_until).where(
    t.transaction_id == bindparam("id"), t.state.in_(_OPEN)
)
_claim_held_locked = _claim_held.with_for_update()

_pending_older_than = (
    select(func.count())
    .select_from(transactions)
    .where(t.state == "PREPARED", t.created_at <= bindparam("before"))
)

_producers_of_group = (
    select(producers)
    .where(producers.c.producer_group == bindparam("group"))
    .order_by(producers.c.client_id)
)
_delete_group = delete(producers).where(producers.c.producer_group == bindparam("group"))


class CheckPart(SqlPart):
    def heartbeat(self, instance: ProducerInstance) -> None:
        stmt = self._insert()(producers).values(**rows.heartbeat_row(instance))
        self.conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["producer_group", "client_id"],
                set_={
                    "callback_url": stmt.excluded.callback_url,
                    "topics": stmt.excluded.topics,
                    "last_heartbeat_at": stmt.excluded.last_heartbeat_at,
                    "access_key": stmt.excluded.access_key,
                    # a new callback URL is a new address: try it at once
                    "unreachable_until": case(
                        (
                            producers.c.callback_url.is_distinct_from(stmt.excluded.callback_url),
                            None,
                        ),
                        else_=producers.c.unreachable_until,
                    ),
                },
            )
        )

    def claim_due_transactions(self, now: int, limit: int) -> list[TransactionRecord]:
        query = _due_locked if self._postgres else _due
        result = self.conn.execute(query, {"now": now, "limit": limit})
        return [rows.transaction_record(row) for row in result]

    def live_producers(self, group: str, since: int) -> list[ProducerInstance]:
        result = self.conn.execute(_live_producers, {"group": group, "since": since})
        return [rows.producer_instance(row) for row in result]

    def assign_check(self, assignment: CheckAssignment) -> None:
        claim = assignment.claim
        params = {
            "b_id": assignment.transaction_id,
            "b_client": assignment.client_id,
            "b_pull": assignment.pending_pull,
            "b_until": claim.until,
            "b_by": claim.claimed_by,
        }
        self.conn.execute(_assign, params)

    def count_check(self, transaction_id: str, now: int, error: str | None) -> None:
        params = {
            "b_id": transaction_id,
            "b_now": now,
            "b_error": error,
            "b_error_at": now if error else None,
        }
        self.conn.execute(_count, params)

    def note_undelivered(self, transaction_id: str, error: str, now: int) -> int | None:
        params = {"b_id": transaction_id, "b_error": error, "b_now": now}
        since = self.conn.execute(_undelivered, params).scalar()
        return None if since is None else int(since)

    def mark_unreachable(
        self, group: str, client_id: str, *, until: int, error: str, now: int
    ) -> None:
        params = {
            "b_group": group,
            "b_client": client_id,
            "b_until": until,
            "b_error": error,
            "b_now": now,
        }
        self.conn.execute(_unreachable, params)

    def mark_reachable(self, group: str, client_id: str) -> None:
        self.conn.execute(_reachable, {"b_group": group, "b_client": client_id})

    def undelivered_halves(self, before: int) -> int:
        return int(self.conn.execute(_undelivered_before, {"before": before}).scalar_one())

    def check_claim(self, transaction_id: str) -> tuple[str | None, int | None]:
        row = self.conn.execute(_claim_of, {"id": transaction_id}).first()
        return (None, None) if row is None else (row.claimed_by, row.claimed_until)

    def holds_claim(self, transaction_id: str, claim: CheckClaim, now: int) -> bool:
        query = _claim_held_locked if self._postgres else _claim_held
        row = self.conn.execute(query, {"id": transaction_id}).first()
        return row is not None and claim.held(row.claimed_by, row.claimed_until, now)

    def schedule_check(self, transaction_id: str, at: int) -> None:
        self.conn.execute(_schedule, {"b_id": transaction_id, "b_at": at})

    def discard_transaction(self, transaction_id: str, at: int, reason: str) -> bool:
        params = {"b_id": transaction_id, "b_at": at, "b_reason": reason}
        return self.conn.execute(_discard, params).rowcount == 1

    def pending_pull_checks(
        self, group: str, client_id: str, limit: int
    ) -> list[TransactionRecord]:
        query = _pending_pull_locked if self._postgres else _pending_pull
        result = self.conn.execute(query, {"group": group, "client": client_id, "limit": limit})
        return [rows.transaction_record(row) for row in result]

    def mark_pulled(self, transaction_id: str, now: int, next_check_at: int) -> None:
        params = {"b_id": transaction_id, "b_now": now, "b_next": next_check_at}
        self.conn.execute(_mark_pulled, params)

    def finish_check(self, transaction_id: str, next_check_at: int) -> None:
        self.conn.execute(_finish_prepared, {"b_id": transaction_id, "b_next": next_check_at})
        self.conn.execute(_finish_discarded, {"b_id": transaction_id})

    def force_check(self, transaction_id: str, now: int) -> None:
        self.conn.execute(_force, {"b_id": transaction_id, "b_now": now})

    def pending_by_age(self, now: int, ages_ms: Sequence[int]) -> dict[int, int]:
        return {
            age: int(self.conn.execute(_pending_older_than, {"before": now - age}).scalar_one())
            for age in ages_ms
        }

    def list_producers(self, group: str) -> list[ProducerInstance]:
        result = self.conn.execute(_producers_of_group, {"group": group})
        return [rows.producer_instance(row) for row in result]

    def delete_producer_group(self, group: str) -> int:
        return self.conn.execute(_delete_group, {"group": group}).rowcount
