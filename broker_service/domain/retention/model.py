"""Retention's records: what the store tells the purge about a queue and its readers, and what a
purge did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from broker_service.domain.consumers.model import ConsumeFrom

LEASE = "retention"

# The tables a purge deletes from, as its counts name them.
TABLES = (
    "messages",
    "message_keys",
    "transactions",
    "deliveries",
    "trace_events",
    "purged_ids",
)


class QueueHead(NamedTuple):
    """A queue with something stored: its offsets and when its oldest message was stored
    (None when the message at ``min_offset`` is gone: a queue with holes, such as the half
    topic's, whose rows go one by one)."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    oldest_stored_at: int | None


class HeadRow(NamedTuple):
    queue_offset: int
    stored_at: int


@dataclass(frozen=True, slots=True)
class Position:
    """Where a consumer group (``client_id`` ''), or one broadcasting member, stands in a queue:
    ``committed_offset`` is the oldest offset it has not yet passed."""

    client_id: str
    committed_offset: int


@dataclass(frozen=True, slots=True)
class Reader:
    """A consumer group that reads a topic (a subscription, or its own retry topic), with its
    positions in the topic's queues (by queue id) and, when broadcasting, its members' last
    sightings."""

    group: str
    broadcasting: bool
    consume_from: ConsumeFrom
    consume_timestamp: int | None
    own_retry_topic: bool
    positions: dict[int, list[Position]] = field(default_factory=dict)
    members: dict[str, int] = field(default_factory=dict)  # client id -> last seen at


@dataclass(frozen=True, slots=True)
class Expiry:
    """Messages purged before a group (or member) passed them."""

    group: str
    client_id: str
    topic: str
    queue_id: int
    from_offset: int
    to_offset: int
    idle_member: bool = False  # a broadcasting member not seen for the retention (not the limit)

    @property
    def count(self) -> int:
        return self.to_offset - self.from_offset


@dataclass(frozen=True, slots=True)
class Held:
    """A queue whose old messages a group keeps (it has not passed them)."""

    topic: str
    queue_id: int
    group: str
    client_id: str
    offset: int


@dataclass(slots=True)
class PurgeReport:
    """What a purge round did (or, ``dry_run``, would do)."""

    dry_run: bool = False
    purged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    expired: list[Expiry] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)
    complete: bool = True
    export_held: bool = False
    seconds: float = 0.0
    reclaimed: list[str] = field(default_factory=list)  # tables the store vacuumed after it

    def add(self, counts: dict[str, int]) -> None:
        for table, n in counts.items():
            self.purged[table] = self.purged.get(table, 0) + n

    @property
    def total(self) -> int:
        return sum(self.purged.values())


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What the store holds: ``halfmq store stats``."""

    size_bytes: int
    free_bytes: int  # pages the store holds free for new rows (SQLite); 0 on PostgreSQL
    rows: dict[str, int]
    oldest_message_at: int | None  # the oldest message still stored in a user, retry or DLQ topic
    export_watermark: int | None
    expired: dict[str, int]  # consumer group -> messages retention expired before it passed them
