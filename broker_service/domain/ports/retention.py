"""The store's retention role: what the purge reads and deletes (broker_service.domain.retention).

Every delete is bounded (``limit`` rows, or one queue's prefix of at most a batch), so that one
unit of work stays short beside the sends it shares the writer with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from broker_service.domain.consumers.model import DeliveryState
from broker_service.domain.retention.model import HeadRow, QueueHead, Reader, StoreStats

DELAYED_SCAN = 5_000  # offsets of a schedule queue scanned for released messages at a time
# A delivery in one of these states is over: only its record is kept, until retention purges it.
FINISHED_STATES = (
    DeliveryState.ACKED,
    DeliveryState.NACKED,
    DeliveryState.EXPIRED,
    DeliveryState.DEAD,
)


@dataclass(frozen=True, slots=True)
class HeadPurge:
    """What :meth:`RetentionStore.purge_queue_head` deletes: the messages of queue
    ``topic``/``queue_id`` from offset ``start`` (its ``min_offset``) to ``end``, as of ``now``;
    ``dry_run``: count them, delete nothing."""

    topic: str
    queue_id: int
    start: int
    end: int
    now: int
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class DelayedPurge:
    """What :meth:`RetentionStore.purge_released_delayed` deletes: the delayed messages of the
    schedule queue ``topic``/``queue_id`` released before ``released_before`` and stored before
    ``stored_before``, at most ``limit`` (None: all), among its offsets ``start`` (None: the
    queue's ``min_offset``) to ``end`` (None: :meth:`end_from`); those still waiting stay.
    ``dry_run``: count those of the whole queue, delete nothing."""

    topic: str
    queue_id: int
    released_before: int
    stored_before: int
    limit: int | None = None
    dry_run: bool = False
    start: int | None = None
    end: int | None = None

    def done(self, released_at: int | None, stored_at: int) -> bool:
        """Whether a message so released and stored is one to purge."""
        return (
            released_at is not None
            and released_at < self.released_before
            and stored_at < self.stored_before
        )

    def end_from(self, start: int) -> int:
        """``end``, else ``DELAYED_SCAN`` offsets past ``start`` (``limit`` if more): a bounded
        range, however many messages still waiting come before it."""
        if self.end is not None:
            return self.end
        return start + max(self.limit or 0, DELAYED_SCAN)


@dataclass(frozen=True, slots=True)
class DeliveryPurge:
    """What :meth:`RetentionStore.purge_deliveries` deletes: the finished deliveries
    (:data:`FINISHED_STATES`) finished before ``finished_before`` and handed out before
    ``delivered_before``, at most ``limit`` (None: all); ``dry_run``: count them, delete
    nothing.  Open ones stay."""

    finished_before: int
    delivered_before: int
    limit: int | None = None
    dry_run: bool = False

    def done(self, state: DeliveryState, delivered_at: int, finished_at: int | None) -> bool:
        """Whether a delivery in ``state``, so handed out and finished, is one to purge."""
        return (
            state in FINISHED_STATES
            and delivered_at < self.delivered_before
            and finished_at is not None
            and finished_at < self.finished_before
        )


class RetentionStore(Protocol):
    def hold_lease(self, name: str, holder: str, now: int, until: int) -> bool:
        """Take or renew the lease ``name`` for ``holder`` until ``until``; False when another
        holder has it and it has not run out.  In the transaction of the work it guards."""
        ...

    def queue_heads(self) -> list[QueueHead]:
        """Every queue with something stored, and its oldest message's store time."""
        ...

    def queue_head_rows(self, topic: str, queue_id: int, start: int, limit: int) -> list[HeadRow]:
        """The queue's messages from offset ``start`` on, oldest first, at most ``limit``."""
        ...

    def readers_of(self, topic: str) -> list[Reader]: ...
    def export_watermark(self, name: str) -> int | None:
        """How far (ms) the exporter ``name`` has read; None when it never has."""
        ...

    def purge_queue_head(self, head: HeadPurge) -> dict[str, int]:
        """Delete the messages ``head`` names and their key rows, remember their ids as purged
        (at ``head.now``), and raise the queue's ``min_offset`` to ``head.end``: counts by table.
        ``head.dry_run``: count them, delete nothing."""
        ...

    def expire_position(
        self, group: str, client_id: str, topic: str, queue_id: int, end: int, now: int
    ) -> int:
        """Move the group's (member's) position in the queue past ``end``: its open deliveries
        below ``end`` expire, the skipped offsets are added to its expired count (returned)."""
        ...

    # The purges below take ``limit`` rows (None: all) and, ``dry_run``, only count them.

    def purge_transactions(
        self, before: int, limit: int | None, now: int, *, dry_run: bool = False
    ) -> dict[str, int]:
        """Transactions resolved (committed, rolled back) before ``before``, with their half, op
        record and parked copy; never a PREPARED or DISCARDED one."""
        ...

    def purge_released_delayed(self, purge: DelayedPurge) -> dict[str, int]:
        """The released delayed messages ``purge`` names: ``{"messages": n}``."""
        ...

    def purge_deliveries(self, purge: DeliveryPurge) -> int:
        """The finished deliveries ``purge`` names; open ones stay."""
        ...

    def purge_trace(self, before: int, limit: int | None, *, dry_run: bool = False) -> int: ...
    def purge_purged_ids(self, before: int, limit: int | None, *, dry_run: bool = False) -> int: ...
    def compact(self) -> int:
        """Give free space back to the file system where the store can (SQLite's incremental
        vacuum); the pages freed."""
        ...

    def store_stats(self, export_watermark: str, *, count_rows: bool = True) -> StoreStats:
        """Sizes, row counts (exact: a full count of each table; none, ``rows`` empty, without
        ``count_rows``), the oldest stored message."""
        ...

    def purged_at(self, kind: str, ids: Sequence[str]) -> int | None:
        """When one of ``ids`` (``kind`` 'm' msg_id, 't' transaction id) was purged; None when
        none was."""
        ...


class StoreUpkeep(Protocol):
    async def reclaim(self, purged: Mapping[str, int]) -> list[str]:
        """After every purge round (one that deleted nothing too; ``purged``: the rows it deleted
        by table), outside its transactions:
        let the store make the space of deleted rows reusable where that takes more than the
        deletes (PostgreSQL's VACUUM).  The tables it reclaimed."""
        ...
