"""The store's check-back role: producer instances (their heartbeats), claiming due halves, and
the checks assigned to instances.  Claims live in the store, so that brokers sharing it never
check one half twice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from broker_service.domain.transactions.model import ProducerInstance, TransactionRecord


class CheckStore(Protocol):
    # producer instances
    def heartbeat(
        self,
        group: str,
        client_id: str,
        callback_url: str | None,
        topics: Sequence[str],
        at: int,
        access_key: str | None = None,
    ) -> None: ...
    def live_producers(self, group: str, since: int) -> list[ProducerInstance]: ...
    def list_producers(self, group: str) -> list[ProducerInstance]: ...
    def delete_producer_group(self, group: str) -> int: ...
    def mark_unreachable(
        self, group: str, client_id: str, *, until: int, error: str, now: int
    ) -> None: ...
    def mark_reachable(self, group: str, client_id: str) -> None:
        """Checks may go to the instance again at once (its last error stays, as history)."""
        ...

    # rounds
    def claim_due_transactions(self, now: int, limit: int) -> list[TransactionRecord]:
        """PREPARED (or operator-forced DISCARDED) halves whose ``next_check_at`` has passed,
        oldest first, locked so that no other broker claims them in this round."""
        ...

    def assign_check(
        self,
        transaction_id: str,
        *,
        client_id: str,
        pending_pull: bool,
        until: int,
        claimed_by: str,
    ) -> None:
        """Hand the claimed check to an instance, in flight ``until``; nothing is counted yet."""
        ...

    def count_check(self, transaction_id: str, now: int, error: str | None) -> None:
        """A check reached its instance: ``check_times`` + 1, the delivery failures forgotten;
        ``error`` when the instance's answer was an error (status, time-out after sending)."""
        ...

    def note_undelivered(self, transaction_id: str, error: str, now: int) -> int | None:
        """A check reached nobody: keep ``error``; return since when checks have failed delivery
        (None if the half is no longer open)."""
        ...

    def check_claim(self, transaction_id: str) -> tuple[str | None, int | None]:
        """Which broker holds the half's claim (a check in flight), and until when."""
        ...

    def holds_claim(self, transaction_id: str, claimed_by: str, until: int, now: int) -> bool:
        """Whether the claim ``claimed_by`` took until ``until`` is still the half's, and ``now``
        is before its end; the half (if open) stays locked against other brokers' rounds until
        the store transaction ends."""
        ...

    def schedule_check(self, transaction_id: str, at: int) -> None: ...
    def discard_transaction(self, transaction_id: str, at: int, reason: str) -> bool: ...
    def finish_check(self, transaction_id: str, next_check_at: int) -> None: ...
    def force_check(self, transaction_id: str, now: int) -> None: ...

    # pull mode
    def pending_pull_checks(
        self, group: str, client_id: str, limit: int
    ) -> list[TransactionRecord]: ...
    def mark_pulled(self, transaction_id: str, now: int, next_check_at: int) -> None: ...

    # what is pending
    def undelivered_halves(self, before: int) -> int:
        """Open halves whose checks have failed delivery since ``before`` or earlier."""
        ...

    def pending_by_age(self, now: int, ages_ms: Sequence[int]) -> dict[int, int]: ...
