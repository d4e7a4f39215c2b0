"""The store's check-back role: producer instances (their heartbeats), claiming due halves, and
the checks assigned to instances.  Claims live in the store, so that brokers sharing it never
check one half twice."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from broker_service.domain.transactions.model import ProducerInstance, TransactionRecord


@dataclass(frozen=True, slots=True)
class CheckClaim:
    """A broker's claim on a half while its check is in flight: ``claimed_by`` holds it until
    ``until``."""

    claimed_by: str
    until: int

    def held(self, claimed_by: str | None, claimed_until: int | None, now: int) -> bool:
        """Whether a half claimed by ``claimed_by`` until ``claimed_until`` is still under this
        claim, ``now`` before its end."""
        return claimed_by == self.claimed_by and claimed_until == self.until and now < self.until


@dataclass(frozen=True, slots=True)
class CheckAssignment:
    """What :meth:`CheckStore.assign_check` writes: the check of ``transaction_id`` handed to the
    instance ``client_id`` (``pending_pull``: one that pulls its checks) under ``claim``."""

    transaction_id: str
    client_id: str
    pending_pull: bool
    claim: CheckClaim


class CheckStore(Protocol):
    # producer instances
    def heartbeat(self, instance: ProducerInstance) -> None:
        """Keep the instance as its heartbeat describes it (its delivery errors stay; so does
        its ``unreachable_until``, unless its callback URL changed: a new address is tried at
        once)."""
        ...

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

    def assign_check(self, assignment: CheckAssignment) -> None:
        """Hand the claimed check to an instance, in flight until the claim's end; nothing is
        counted yet."""
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

    def holds_claim(self, transaction_id: str, claim: CheckClaim, now: int) -> bool:
        """Whether ``claim`` is still the half's, and ``now`` is before its end; the half (if
        open) stays locked against other brokers' rounds until the store transaction ends."""
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
