"""A transaction's check audit: every check the trace recorded for it, and why the next round will
or will not check it -- what an operator asks first about a half that stays PREPARED.

The checks are its half's ``CHECKED`` trace events (none while the ``trace`` setting is off); the
reasons are read from its row, its claim and its group's live instances, in the order the round
itself would meet them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from broker_service.domain.config import CheckPolicy
from broker_service.domain.ports import CheckStore, StoreTx
from broker_service.domain.transactions.halves import unknown_transaction
from broker_service.domain.transactions.model import (
    CHECKED,
    CheckAudit,
    CheckDue,
    CheckEntry,
    TransactionRecord,
    TransactionState,
)

_RESOLVED = (TransactionState.COMMITTED, TransactionState.ROLLED_BACK)


def check_audit(
    transaction_id: str, policy: CheckPolicy, transaction_timeout_ms: int, now: int
) -> Callable[[StoreTx], CheckAudit]:
    """The read unit of :meth:`TransactionService.checks`."""

    def unit(tx: StoreTx) -> CheckAudit:
        record = tx.get_transaction(transaction_id)
        if record is None:
            raise unknown_transaction(tx, transaction_id)
        checks = [
            _entry(at, actor, recorded)
            for at, event, actor, recorded in tx.trace_events_of(record.msg_id)
            if event == CHECKED and _of(recorded, transaction_id)
        ]
        checks.sort(key=lambda entry: entry.at)
        return _why(tx, record, checks, policy, transaction_timeout_ms, now)

    return unit


def _why(
    tx: CheckStore,
    record: TransactionRecord,
    checks: list[CheckEntry],
    policy: CheckPolicy,
    transaction_timeout_ms: int,
    now: int,
) -> CheckAudit:
    def audit(due: CheckDue, reason: str, **more: Any) -> CheckAudit:
        return CheckAudit(record, checks, due, reason, record.next_check_at, **more)

    if record.state in _RESOLVED:
        by = record.resolved_by.value if record.resolved_by else "someone"
        return audit(CheckDue.RESOLVED, f"{record.state.value} by {by}: never checked again")
    if record.state is TransactionState.DISCARDED and record.next_check_at is None:
        return audit(
            CheckDue.DISCARDED,
            f"DISCARDED ({record.discard_reason}): parked until an operator checks it again",
        )
    claimed_by, claimed_until = tx.check_claim(record.transaction_id)
    if claimed_by is not None and claimed_until is not None and claimed_until > now:
        return audit(
            CheckDue.CLAIMED,
            f"a check is in flight: claimed by broker {claimed_by} until its answer or time-out",
            until=claimed_until,
            claimed_by=claimed_by,
        )
    immunity = record.check_immunity_ms
    immune_until = record.created_at + (transaction_timeout_ms if immunity is None else immunity)
    if record.next_check_at == immune_until and now < immune_until and not checks:
        return audit(
            CheckDue.IMMUNE,
            "younger than its check immunity: the producer still has time to decide",
            until=immune_until,
        )
    if not tx.live_producers(record.producer_group, now - policy.producer_expiry_ms):
        return audit(
            CheckDue.NO_LIVE_INSTANCE,
            f"no live instance of producer group {record.producer_group!r}: rounds skip it, "
            "uncounted, until one heartbeats",
        )
    if record.next_check_at is not None and record.next_check_at <= now:
        return audit(CheckDue.DUE, "due: the next check round claims it")
    return audit(CheckDue.WAITING, "checked again at next_check_at", until=record.next_check_at)


def _of(recorded: str | None, transaction_id: str) -> bool:
    """A msg_id names one transaction; an event written for another (a re-used id) is not its."""
    detail = _detail(recorded)
    return bool(detail.get("transaction_id", transaction_id) == transaction_id)


def _detail(recorded: str | None) -> dict[str, Any]:
    loaded = orjson.loads(recorded) if recorded else {}
    return loaded if isinstance(loaded, dict) else {}


def _entry(at: int, actor: str, recorded: str | None) -> CheckEntry:
    detail = _detail(recorded)
    return CheckEntry(
        at=at,
        mode=detail.get("mode"),
        instance=actor,
        check_times=detail.get("check_times"),
        answer=detail.get("answer"),
        failure=detail.get("failure"),
        latency_ms=detail.get("latency_ms"),
        status=detail.get("status"),
        error=detail.get("error"),
    )
