"""The retention part of ``MemoryTx``: what the purge reads and deletes.  A purged msg_id or
transaction id is remembered (by the id itself, where the SQL store keeps a 64-bit hash), so that
a lookup can answer "expired" instead of "never existed"."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from broker_service.domain import names
from broker_service.domain.consumers.model import (
    DeliveryState,
    retry_topic,
)
from broker_service.domain.ports.retention import DelayedPurge, DeliveryPurge, HeadPurge
from broker_service.domain.retention.model import (
    TABLES,
    HeadRow,
    Position,
    QueueHead,
    Reader,
    StoreStats,
)
from broker_service.domain.retention.plan import is_prefix_queue
from broker_service.domain.transactions.model import TransactionState
from broker_service.memstore.consumers import ProgressPart
from broker_service.memstore.state import Lease

# The topics whose rows go with their transaction: the half, its op record, its parked copy.
_HALF_TOPICS = (names.HALF_TOPIC, names.OP_HALF_TOPIC, names.CHECK_MAX_TIME_TOPIC)
_RESOLVED = (TransactionState.COMMITTED, TransactionState.ROLLED_BACK)


class RetentionPart(ProgressPart):
    # -- the lease ------------------------------------------------------------------------------

    def hold_lease(self, name: str, holder: str, now: int, until: int) -> bool:
        held = self.s.leases.get(name)
        if held is not None and held.holder != holder and held.until >= now:
            return False
        self.put(self.s.leases, name, Lease(holder, until))
        return True

    # -- what there is --------------------------------------------------------------------------

    def queue_heads(self) -> list[QueueHead]:
        heads = []
        for (topic, queue_id), row in sorted(self.s.queues.items()):
            if row.next_offset > row.min_offset:
                head = self.get_message_at(topic, queue_id, row.min_offset)
                oldest = None if head is None else head.stored_at
                heads.append(QueueHead(topic, queue_id, row.min_offset, row.next_offset, oldest))
        return heads

    def queue_head_rows(self, topic: str, queue_id: int, start: int, limit: int) -> list[HeadRow]:
        return [
            HeadRow(m.queue_offset, m.stored_at)
            for m in self.messages_from(topic, queue_id, start, limit)
        ]

    def readers_of(self, topic: str) -> list[Reader]:
        if topic.startswith(names.RETRY_PREFIX):
            wanted = {topic.removeprefix(names.RETRY_PREFIX)}
        else:
            wanted = {group for group, t in self.s.subscriptions if t == topic}
        groups = [self.s.groups[name] for name in sorted(wanted) if name in self.s.groups]
        readers = []
        for group in groups:
            positions: dict[int, list[Position]] = {}
            for (g, t, queue_id, client_id), p in sorted(self.s.progress.items()):
                if (g, t) == (group.name, topic):
                    positions.setdefault(queue_id, []).append(
                        Position(client_id, p.committed_offset)
                    )
            members = {}
            if group.broadcasting:
                members = {m.client_id: m.last_seen_at for m in self.list_consumers(group.name)}
            readers.append(
                Reader(
                    group=group.name,
                    broadcasting=group.broadcasting,
                    consume_from=group.consume_from,
                    consume_timestamp=group.consume_timestamp,
                    own_retry_topic=topic == retry_topic(group.name),
                    positions=positions,
                    members=members,
                )
            )
        return readers

    def export_watermark(self, name: str) -> int | None:
        return self.s.export_watermarks.get(name)

    # -- deletes --------------------------------------------------------------------------------

    def _remember(self, kind: str, ids: Iterable[str], now: int) -> None:
        for value in ids:
            if (kind, value) not in self.s.purged:
                self.put(self.s.purged, (kind, value), now)

    def _raise_min_offsets(self, touched: Iterable[tuple[str, int]]) -> None:
        """A queue that loses rows one by one: its min_offset is its oldest row's offset."""
        for topic, queue_id in sorted(set(touched)):
            row = self.s.queues.get((topic, queue_id))
            if row is None:
                continue
            oldest = next(self.queue_messages(topic, queue_id), None)
            lowest = row.next_offset if oldest is None else oldest.queue_offset
            self.put(self.s.queues, (topic, queue_id), row._replace(min_offset=lowest))

    def _key_rows(
        self, topic: str, queue_id: int, start: int, end: int
    ) -> list[tuple[str, int, int]]:
        return [
            position
            for position in self.s.message_keys
            if position[:2] == (topic, queue_id) and start <= position[2] < end
        ]

    def purge_queue_head(self, head: HeadPurge) -> dict[str, int]:
        topic, queue_id, start, end = head.topic, head.queue_id, head.start, head.end
        key_rows = self._key_rows(topic, queue_id, start, end)
        keys = sum(len(self.s.message_keys[position]) for position in key_rows)
        if head.dry_run:
            return {"messages": end - start, "message_keys": keys}
        doomed = [
            message_id
            for (t, q, offset), message_id in list(self.s.at_position.items())
            if (t, q) == (topic, queue_id) and start <= offset < end
        ]
        gone = [m for m in map(self.delete_message, doomed) if m is not None]
        self._remember("m", (m.msg_id for m in gone), head.now)
        for position in key_rows:
            self.drop(self.s.message_keys, position)
        row = self.s.queues.get((topic, queue_id))
        if row is not None and row.min_offset < end:
            self.put(self.s.queues, (topic, queue_id), row._replace(min_offset=end))
        return {"messages": len(gone), "message_keys": keys}

    def expire_position(
        self, group: str, client_id: str, topic: str, queue_id: int, end: int, now: int
    ) -> int:
        key = (group, topic, queue_id, client_id)
        known = self.s.progress.get(key)
        if known is None or known.committed_offset >= end:
            return 0
        skipped = end - known.committed_offset
        moved = known._replace(
            expired=known.expired + skipped,
            committed_offset=end,
            pulled_offset=max(known.pulled_offset, end),
            updated_at=now,
        )
        self.put(self.s.progress, key, moved)
        for d in list(self.open_of(group)):
            if (
                (d.topic, d.queue_id) == (topic, queue_id)
                and d.queue_offset < end
                and (not client_id or d.client_id == client_id)
            ):
                self.set_delivery(d, d.ended(DeliveryState.EXPIRED, now))
        return skipped

    def purge_transactions(
        self, before: int, limit: int | None, now: int, *, dry_run: bool = False
    ) -> dict[str, int]:
        old = [
            row.record
            for _, row in sorted(self.s.transactions.items(), key=lambda item: item[1].seq)
            if row.record.state in _RESOLVED
            and row.record.created_at < before
            and row.record.resolved_at is not None
            and row.record.resolved_at < before
        ]
        if not dry_run:
            old = old[:limit] if limit is not None else old
            if not old:
                return {"transactions": 0}
        theirs = [
            self.s.messages[message_id]
            for record in old
            for message_id in sorted(self.s.by_transaction.get(record.transaction_id, ()))
            if self.s.messages[message_id].topic in _HALF_TOPICS
        ]
        positions = [(m.topic, m.queue_id, m.queue_offset) for m in theirs]
        keys = sum(len(self.s.message_keys.get(p, ())) for p in positions)
        counts = {"transactions": len(old), "messages": len(theirs), "message_keys": keys}
        if dry_run:
            return counts
        for m in theirs:
            self.delete_message(m.id)
        for position in positions:
            self.drop(self.s.message_keys, position)
        self._raise_min_offsets((m.topic, m.queue_id) for m in theirs)
        self._remember("t", (r.transaction_id for r in old), now)
        self._remember("m", (r.msg_id for r in old), now)
        for record in old:
            self.drop(self.s.transactions, record.transaction_id)
        return counts

    def purge_released_delayed(self, purge: DelayedPurge) -> dict[str, int]:
        topic, queue_id, limit = purge.topic, purge.queue_id, purge.limit
        if purge.dry_run:
            theirs = self.queue_messages(topic, queue_id)
            return {"messages": sum(1 for m in theirs if purge.done(m.released_at, m.stored_at))}
        start = purge.start
        if start is None:
            row = self.s.queues.get((topic, queue_id))
            if row is None:
                return {"messages": 0}
            start = row.min_offset
        end = purge.end_from(start)
        chosen: list[int] = []
        for m in self.queue_messages(topic, queue_id, start):
            if m.queue_offset >= end or (limit is not None and len(chosen) >= limit):
                break
            if purge.done(m.released_at, m.stored_at):
                chosen.append(m.id)
        for message_id in chosen:
            self.delete_message(message_id)
        if chosen:
            self._raise_min_offsets([(topic, queue_id)])
        return {"messages": len(chosen)}

    def purge_deliveries(self, purge: DeliveryPurge) -> int:
        old = [
            d
            for _, d in sorted(self.s.deliveries.items())
            if purge.done(d.state, d.delivered_at, d.finished_at)
        ]
        if purge.dry_run:
            return len(old)
        old = old[: purge.limit] if purge.limit is not None else old
        for d in old:
            self.drop(self.s.deliveries, d.id)
            self.drop(self.s.open_deliveries, d.id)
            if self.s.by_handle.get(d.receipt_handle) == d.id:
                self.drop(self.s.by_handle, d.receipt_handle)
        return len(old)

    def purge_trace(self, before: int, limit: int | None, *, dry_run: bool = False) -> int:
        old = [i for i, row in sorted(self.s.trace.items()) if row.at < before]
        if dry_run:
            return len(old)
        old = old[:limit] if limit is not None else old
        for event_id in old:
            row = self.drop(self.s.trace, event_id)
            if row is not None:
                self.remove_from(self.s.trace_by_msg_id, row.msg_id, event_id)
        return len(old)

    def purge_purged_ids(self, before: int, limit: int | None, *, dry_run: bool = False) -> int:
        old = sorted((at, key) for key, at in self.s.purged.items() if at < before)
        if dry_run:
            return len(old)
        old = old[:limit] if limit is not None else old
        for _, key in old:
            self.drop(self.s.purged, key)
        return len(old)

    def compact(self) -> int:
        """Nothing to give back: no file."""
        return 0

    # -- what an operator asks -------------------------------------------------------------------

    def store_stats(self, export_watermark: str, *, count_rows: bool = True) -> StoreStats:
        """Row counts as the SQL store's; no file, so no size."""
        counts = {
            "messages": len(self.s.messages),
            "message_keys": sum(map(len, self.s.message_keys.values())),
            "transactions": len(self.s.transactions),
            "deliveries": len(self.s.deliveries),
            "trace_events": len(self.s.trace),
            "purged_ids": len(self.s.purged),
        }
        assert set(counts) == set(TABLES)
        oldest = [
            h.oldest_stored_at
            for h in self.queue_heads()
            if h.oldest_stored_at is not None and is_prefix_queue(h.topic)
        ]
        expired: dict[str, int] = {}
        for (group, *_), p in self.s.progress.items():
            if p.expired > 0:
                expired[group] = expired.get(group, 0) + p.expired
        return StoreStats(
            size_bytes=0,
            free_bytes=0,
            rows={name: counts[name] for name in TABLES} if count_rows else {},
            oldest_message_at=min(oldest, default=None),
            export_watermark=self.export_watermark(export_watermark),
            expired=expired,
        )

    # -- lookups --------------------------------------------------------------------------------

    def purged_at(self, kind: str, ids: Sequence[str]) -> int | None:
        found = [self.s.purged[(kind, value)] for value in ids if (kind, value) in self.s.purged]
        return max(found, default=None)
