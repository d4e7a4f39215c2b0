"""The store's transactions role: the index of half messages and the one decision each gets."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from broker_service.domain.messages.model import PendingMessage, StoredMessage
from broker_service.domain.transactions.model import (
    ResolvedBy,
    TransactionRecord,
    TransactionState,
)


class ResolveOutcome(Enum):
    """What :meth:`TransactionStore.resolve_transaction` did with its conditional update.

    ``DEFERRED`` is a store's right, not a guess: the unit that asked has just read the
    transaction open, so the store may make the update with the rest of its write batch (one round
    trip for many).  If the update then finds the transaction no longer open (another broker
    decided it meanwhile), the store undoes the batch and runs its units again, this one answered
    ``NOT_OPEN`` -- so nothing a unit did after a deferred resolution commits without it."""

    RESOLVED = "resolved"  # the transaction has left its open state: this decision won
    DEFERRED = "deferred"  # the update goes with the batch, on the terms above
    NOT_OPEN = "not open"  # the transaction was not (any more) open: another decision won

    @property
    def won(self) -> bool:
        return self is not ResolveOutcome.NOT_OPEN


@dataclass(frozen=True, slots=True)
class TransactionEnd:
    """A transaction's move out of its open state, as the resolving update writes it: to
    ``state`` at ``at``, decided ``by``; ``client``: the producer instance that asked (its
    ``client_id``), if it said."""

    transaction_id: str
    state: TransactionState
    at: int
    by: ResolvedBy
    client: str | None = None


@dataclass(frozen=True, slots=True)
class TransactionQuery:
    """Which transactions a listing wants, oldest first: each field that is set narrows it."""

    state: TransactionState | None = None
    producer_group: str | None = None
    created_before: int | None = None
    limit: int = 1_000


class TransactionStore(Protocol):
    def insert_transaction(self, record: TransactionRecord, half: PendingMessage) -> None:
        """Index a half appended in this unit (its ``half_offset`` comes from ``half``)."""
        ...

    def get_transaction(self, transaction_id: str) -> TransactionRecord | None: ...
    def transaction_with_half(
        self, transaction_id: str
    ) -> tuple[TransactionRecord, StoredMessage | None] | None:
        """The transaction and its half message (None if the half is gone), in one lookup."""
        ...

    def list_transactions(self, query: TransactionQuery) -> list[TransactionRecord]: ...
    def resolve_transaction(self, end: TransactionEnd) -> ResolveOutcome:
        """Move a PREPARED or DISCARDED transaction, which this unit has just read, as ``end``
        says: the one conditional update that lets only one decision win."""
        ...
