"""The one interface between the domain and the store.

A *unit of work* is a plain function ``fn(tx: StoreTx) -> T``.  The store runs write units through
:meth:`Store.write` -- many of them share one store commit (group commit), and each caller is answered
only after that commit -- and read units through :meth:`Store.read`.  Inside a unit, what it appended is
visible to later calls of the same batch; offsets of appended messages are filled in before commit.

A write unit must do its checks before its first change: when it raises a :class:`BrokerError`,
the store drops what it appended and the batch goes on without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from broker_service.domain.model import (
    PendingMessage,
    ProducerInstance,
    QueueInfo,
    ResolvedBy,
    StoredMessage,
    Topic,
    TransactionRecord,
    TransactionState,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MessageQuery:
    topic: str | None = None
    key: str | None = None
    begin: int | None = None
    end: int | None = None
    limit: int = 32


class StoreTx(Protocol):
    # topics and queues
    def get_topic(self, name: str) -> Topic | None: ...
    def list_topics(self) -> list[Topic]: ...
    def create_topic(self, topic: Topic) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def queue_infos(self, topic: str) -> list[QueueInfo]: ...

    # messages
    def append(self, message: PendingMessage) -> None: ...
    def find_sent(self, dedup_keys: Sequence[str]) -> dict[str, StoredMessage | PendingMessage]: ...
    def get_message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None: ...
    def find_messages(self, msg_id: str) -> list[StoredMessage]: ...
    def query_messages(self, query: MessageQuery) -> list[StoredMessage]: ...
    def real_message_of(
        self, transaction_id: str, topic: str
    ) -> StoredMessage | PendingMessage | None: ...

    # transactions
    def insert_transaction(self, record: TransactionRecord, half: PendingMessage) -> None:
        """Index a half appended in this unit (its ``half_offset`` comes from ``half``)."""
        ...

    def get_transaction(self, transaction_id: str) -> TransactionRecord | None: ...
    def list_transactions(
        self,
        state: TransactionState | None,
        producer_group: str | None,
        created_before: int | None,
        limit: int,
    ) -> list[TransactionRecord]: ...
    def resolve_transaction(
        self,
        transaction_id: str,
        state: TransactionState,
        at: int,
        by: ResolvedBy,
    ) -> bool:
        """Move a PREPARED or DISCARDED transaction to ``state``; False if it was not (any more)."""
        ...

    # delayed messages
    def claim_due_delayed(self, topic: str, now: int, limit: int) -> list[StoredMessage]: ...
    def mark_released(self, message_id: int, at: int) -> None: ...
    def next_delayed_at(self, topic: str) -> int | None: ...

    # check-back
    def claim_due_transactions(self, now: int, limit: int) -> list[TransactionRecord]:
        """PREPARED (or operator-forced DISCARDED) halves whose ``next_check_at`` has passed,
        oldest first, locked so that no other broker claims them in this round."""
        ...

    def live_producers(self, group: str, since: int) -> list[ProducerInstance]: ...
    def assign_check(
        self,
        transaction_id: str,
        *,
        client_id: str,
        pending_pull: bool,
        check_times: int,
        until: int,
        claimed_by: str,
        now: int,
    ) -> None: ...
    def schedule_check(self, transaction_id: str, at: int) -> None: ...
    def discard_transaction(self, transaction_id: str, at: int, reason: str) -> bool: ...
    def pending_pull_checks(
        self, group: str, client_id: str, limit: int
    ) -> list[TransactionRecord]: ...
    def mark_pulled(self, transaction_id: str, now: int, next_check_at: int) -> None: ...
    def finish_check(self, transaction_id: str, next_check_at: int) -> None: ...
    def force_check(self, transaction_id: str, now: int) -> None: ...
    def pending_by_age(self, now: int, ages_ms: Sequence[int]) -> dict[int, int]: ...
    def list_producers(self, group: str) -> list[ProducerInstance]: ...
    def delete_producer_group(self, group: str) -> int: ...

    # producers
    def heartbeat(
        self, group: str, client_id: str, callback_url: str | None, topics: Sequence[str], at: int
    ) -> None: ...


class Store(Protocol):
    async def write(self, unit: Callable[[StoreTx], T]) -> T: ...
    async def read(self, unit: Callable[[StoreTx], T]) -> T: ...
