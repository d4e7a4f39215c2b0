"""What the in-memory store holds: one dict per table of the SQL schema, keyed as that table's
primary key, each row an immutable record -- and the undo log that lets a unit of work leave
nothing behind.

Every change a unit makes goes through :meth:`Part.put` or :meth:`Part.drop`, which note the
row's old value (or its absence) first; rolling back replays those notes backwards.  Ids
(messages, deliveries, trace events, ...) come from counters that a rollback does not rewind,
as a database's sequences are not.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from broker_service.domain.audit.model import AuditEntry
from broker_service.domain.brokers.model import BrokerPresence
from broker_service.domain.clients.model import ClientProfile
from broker_service.domain.consumers.model import ConsumerGroup, Delivery, Member, Subscription
from broker_service.domain.messages.model import StoredMessage, Topic
from broker_service.domain.ports.breaks import BreakStatus
from broker_service.domain.transactions.model import ProducerInstance, TransactionRecord

K = TypeVar("K")
V = TypeVar("V")

QueueKey = tuple[str, int]  # (topic, queue_id)
Position = tuple[str, int, int]  # (topic, queue_id, queue_offset)
ProgressKey = tuple[str, str, int, str]  # (group, topic, queue_id, client_id; '' for the group)


class Queue(NamedTuple):
    next_offset: int  # the offset the queue's next message gets
    min_offset: int  # the smallest offset still stored


class TxRow(NamedTuple):
    """A transaction's row: its record, and the two columns the record does not carry."""

    seq: int  # insertion order, for ties
    record: TransactionRecord
    claimed_by: str | None = None
    claimed_until: int | None = None


class Progress(NamedTuple):
    committed_offset: int
    pulled_offset: int
    updated_at: int
    expired: int = 0


class TraceRow(NamedTuple):
    msg_id: str
    at: int
    event: str
    actor: str
    detail: str | None


class AclVersion(NamedTuple):
    version: str
    content: str
    published_at: int
    published_by: str


class Lease(NamedTuple):
    holder: str
    until: int


@dataclass(slots=True)
class State:
    """The tables, and the indexes the SQL store has as database indexes."""

    topics: dict[str, Topic] = field(default_factory=dict)
    queues: dict[QueueKey, Queue] = field(default_factory=dict)
    messages: dict[int, StoredMessage] = field(default_factory=dict)
    at_position: dict[Position, int] = field(default_factory=dict)  # -> message id
    by_msg_id: dict[str, tuple[int, ...]] = field(default_factory=dict)
    by_dedup_key: dict[str, int] = field(default_factory=dict)
    by_transaction: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # The key index's rows: a message's distinct keys, by its position (rows outlive a message
    # the purge of released delayed messages deletes, as the SQL store's do).
    message_keys: dict[Position, tuple[str, ...]] = field(default_factory=dict)
    transactions: dict[str, TxRow] = field(default_factory=dict)
    producers: dict[tuple[str, str], ProducerInstance] = field(default_factory=dict)
    groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    subscriptions: dict[tuple[str, str], Subscription] = field(default_factory=dict)
    members: dict[tuple[str, str], Member] = field(default_factory=dict)
    progress: dict[ProgressKey, Progress] = field(default_factory=dict)
    deliveries: dict[int, Delivery] = field(default_factory=dict)
    by_handle: dict[str, int] = field(default_factory=dict)
    open_deliveries: dict[int, str] = field(default_factory=dict)  # id -> group
    trace: dict[int, TraceRow] = field(default_factory=dict)
    trace_by_msg_id: dict[str, tuple[int, ...]] = field(default_factory=dict)
    nonces: dict[tuple[int, str, str], None] = field(default_factory=dict)
    acl_versions: dict[int, AclVersion] = field(default_factory=dict)
    purged: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, id) -> purged at
    leases: dict[str, Lease] = field(default_factory=dict)
    export_watermarks: dict[str, int] = field(default_factory=dict)  # name -> exported until
    audit: dict[int, AuditEntry] = field(default_factory=dict)
    brokers: dict[str, BrokerPresence] = field(default_factory=dict)
    clients: dict[str, ClientProfile] = field(default_factory=dict)
    breaks: dict[str, BreakStatus] = field(default_factory=dict)
    ids: dict[str, Iterator[int]] = field(default_factory=dict)

    def next_id(self, table: str) -> int:
        """The table's next id, from 1 (never handed out twice, rolled back or not)."""
        counter = self.ids.get(table)
        if counter is None:
            counter = self.ids[table] = itertools.count(1)
        return next(counter)


_MISSING: Any = object()

Undo = list[tuple[dict[Any, Any], Any, Any]]


class Part:
    """What every part of ``MemoryTx`` stands on: the state, and the undo log of its unit."""

    s: State
    undo: Undo

    def put(self, table: dict[K, V], key: K, value: V) -> None:
        self.undo.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def drop(self, table: dict[K, V], key: K) -> V | None:
        old = table.pop(key, _MISSING)
        if old is _MISSING:
            return None
        self.undo.append((table, key, old))
        return old  # type: ignore[no-any-return]

    def add_to(self, index: dict[K, tuple[int, ...]], key: K, value: int) -> None:
        self.put(index, key, (*index.get(key, ()), value))

    def remove_from(self, index: dict[K, tuple[int, ...]], key: K, value: int) -> None:
        rest = tuple(v for v in index.get(key, ()) if v != value)
        if rest:
            self.put(index, key, rest)
        else:
            self.drop(index, key)


def roll_back(undo: Undo) -> None:
    """Put every row the log noted back as it was, newest change first."""
    for table, key, old in reversed(undo):
        if old is _MISSING:
            table.pop(key, None)
        else:
            table[key] = old
    undo.clear()
