"""The retention part of ``SqlTx``: what the purge reads and deletes (docs/store.md, "Retention").

Every statement is bounded: a queue's prefix below an offset (the unique index on
``(topic, queue_id, queue_offset)`` finds it), or ``limit`` rows taken in primary-key or index
order.  A purged msg_id or transaction id leaves a 64-bit hash in ``purged_ids``, so that a
lookup can answer "expired" instead of "never existed".
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from sqlalchemy import (
    ColumnElement,
    and_,
    case,
    delete,
    func,
    literal,
    select,
    text,
    tuple_,
    update,
)

from broker_service.domain import names
from broker_service.domain.consumers.model import (
    ConsumeFrom,
    DeliveryState,
    MessageModel,
    retry_topic,
)
from broker_service.domain.errors import Busy
from broker_service.domain.ports.retention import (
    FINISHED_STATES,
    DelayedPurge,
    DeliveryPurge,
    HeadPurge,
)
from broker_service.domain.retention.model import (
    TABLES,
    HeadRow,
    Position,
    QueueHead,
    Reader,
    StoreStats,
)
from broker_service.domain.retention.plan import is_prefix_queue
from broker_service.store.deliveries import OPEN
from broker_service.store.fastpath import Prepared
from broker_service.store.part import SqlPart
from broker_service.store.schema import (
    consumer_groups,
    consumer_offsets,
    consumers,
    deliveries,
    export_watermarks,
    leases,
    message_keys,
    messages,
    metadata,
    purged_ids,
    queues,
    subscriptions,
    trace_events,
    transactions,
)
from broker_service.store.statements import queue_from

m, k, q, o, d, t = (
    messages.c,
    message_keys.c,
    queues.c,
    consumer_offsets.c,
    deliveries.c,
    transactions.c,
)

# The topics whose rows go with their transaction: the half, its op record, its parked copy.
_HALF_TOPICS = (names.HALF_TOPIC, names.OP_HALF_TOPIC, names.CHECK_MAX_TIME_TOPIC)
_RESOLVED = ("COMMITTED", "ROLLED_BACK")
_FINISHED = tuple(s.value for s in FINISHED_STATES)
_EXPIRE_TRIES = 8  # reads of a position that another broker's acks keep moving
_PAGES_KEPT = 8  # SQLite keeps a free eighth of its file for new rows; a quarter free is given back
_VACUUM_STEP = 2048  # pages one compact gives back (8 MB of 4 KiB pages): a short writer's turn

# A purge unit's purged-id records in one statement compiled once (a multi-row VALUES would be a
# new statement for SQLAlchemy to compile every unit, most of a unit's time: bench/README.md,
# "Retention soak after the fix"): the hashes as one JSON array (SQLite) or one array (PostgreSQL).
_remember_sqlite = Prepared(
    text(
        "INSERT INTO purged_ids (id_hash, purged_at) SELECT value, :now FROM json_each(:hashes) "
        "WHERE true ON CONFLICT DO NOTHING"
    )
)
_remember_pg = Prepared(
    text(
        "INSERT INTO purged_ids (id_hash, purged_at) "
        "SELECT unnest(CAST(:hashes AS BIGINT[])), CAST(:now AS BIGINT) ON CONFLICT DO NOTHING"
    )
)
_heads = (
    select(q.topic, q.queue_id, q.min_offset, q.next_offset, m.stored_at)
    .select_from(
        queues.outerjoin(
            messages,
            and_(m.topic == q.topic, m.queue_id == q.queue_id, m.queue_offset == q.min_offset),
        )
    )
    .where(q.next_offset > q.min_offset)
    .order_by(q.topic, q.queue_id)
)
_head_rows = queue_from(m.queue_offset, m.stored_at)


def id_hash(kind: str, value: str) -> int:
    """The 64-bit record of a purged id (``kind`` 'm' msg_id, 't' transaction id)."""
    digest = hashlib.blake2b(f"{kind}:{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _in_queue(topic: str, queue_id: int, start: int, end: int) -> ColumnElement[bool]:
    """Offsets ``start`` to ``end`` of a queue: bounded below too, so that an index scan starts
    past the entries of rows deleted before (PostgreSQL keeps them until a vacuum)."""
    return and_(
        m.topic == topic, m.queue_id == queue_id, m.queue_offset >= start, m.queue_offset < end
    )


class RetentionPart(SqlPart):
    # -- the lease ------------------------------------------------------------------------------

    def hold_lease(self, name: str, holder: str, now: int, until: int) -> bool:
        stmt = self._insert()(leases).values(name=name, holder=holder, until=until)
        stmt = stmt.on_conflict_do_update(
            index_elements=[leases.c.name],
            set_={"holder": stmt.excluded.holder, "until": stmt.excluded.until},
            where=(leases.c.holder == holder) | (leases.c.until < now),
        )
        # RETURNING, not the row count: a writer batch on PostgreSQL may run in pipeline mode.
        return self.conn.execute(stmt.returning(leases.c.holder)).first() is not None

    # -- what there is --------------------------------------------------------------------------

    def queue_heads(self) -> list[QueueHead]:
        return [
            QueueHead(r.topic, r.queue_id, r.min_offset, r.next_offset, r.stored_at)
            for r in self.conn.execute(_heads)
        ]

    def queue_head_rows(self, topic: str, queue_id: int, start: int, limit: int) -> list[HeadRow]:
        params = {"topic": topic, "queue": queue_id, "offset": start, "limit": limit}
        rows = _head_rows.all(self.conn, params)
        return [HeadRow(r["queue_offset"], r["stored_at"]) for r in rows]

    def readers_of(self, topic: str) -> list[Reader]:
        g = consumer_groups.c
        if topic.startswith(names.RETRY_PREFIX):
            query = select(consumer_groups).where(g.name == topic.removeprefix(names.RETRY_PREFIX))
        else:
            query = select(consumer_groups).join(
                subscriptions, subscriptions.c.consumer_group == g.name
            )
            query = query.where(subscriptions.c.topic == topic)
        groups = list(self.conn.execute(query))
        if not groups:
            return []
        names_ = [r.name for r in groups]
        positions: dict[str, dict[int, list[Position]]] = {}
        for r in self.conn.execute(
            select(o.consumer_group, o.queue_id, o.client_id, o.committed_offset).where(
                o.topic == topic, o.consumer_group.in_(names_)
            )
        ):
            by_queue = positions.setdefault(r.consumer_group, {})
            by_queue.setdefault(r.queue_id, []).append(Position(r.client_id, r.committed_offset))
        members: dict[str, dict[str, int]] = {}
        broadcasting = [r.name for r in groups if r.message_model == MessageModel.BROADCASTING]
        if broadcasting:
            c = consumers.c
            for member in self.conn.execute(
                select(c.consumer_group, c.client_id, c.last_seen_at).where(
                    c.consumer_group.in_(broadcasting)
                )
            ):
                seen = members.setdefault(member.consumer_group, {})
                seen[member.client_id] = member.last_seen_at
        return [
            Reader(
                group=r.name,
                broadcasting=r.message_model == MessageModel.BROADCASTING,
                consume_from=ConsumeFrom(r.consume_from),
                consume_timestamp=r.consume_timestamp,
                own_retry_topic=topic == retry_topic(r.name),
                positions=positions.get(r.name, {}),
                members=members.get(r.name, {}),
            )
            for r in groups
        ]

    def export_watermark(self, name: str) -> int | None:
        w = export_watermarks.c
        value = self.conn.execute(select(w.exported_until).where(w.name == name)).scalar()
        return None if value is None else int(value)

    # -- deletes --------------------------------------------------------------------------------

    def _remember(self, kind: str, ids: Iterable[str], now: int) -> None:
        hashes = list({id_hash(kind, value) for value in ids})
        if not hashes:
            return
        if self._postgres:
            _remember_pg.rowcount(self.conn, {"hashes": hashes, "now": now})
        else:
            _remember_sqlite.rowcount(
                self.conn, {"hashes": orjson.dumps(hashes).decode(), "now": now}
            )

    def purge_queue_head(self, head: HeadPurge) -> dict[str, int]:
        topic, queue_id, start, end = head.topic, head.queue_id, head.start, head.end
        if head.dry_run:
            counted = select(func.count()).where(
                k.topic == topic,
                k.queue_id == queue_id,
                k.queue_offset >= start,
                k.queue_offset < end,
            )
            return {
                "messages": end - start,
                "message_keys": int(self.conn.execute(counted).scalar_one()),
            }
        where = _in_queue(topic, queue_id, start, end)
        self._remember("m", self.conn.execute(select(m.msg_id).where(where)).scalars(), head.now)
        keys = self.conn.execute(
            delete(message_keys).where(
                k.topic == topic,
                k.queue_id == queue_id,
                k.queue_offset >= start,
                k.queue_offset < end,
            )
        ).rowcount
        gone = self.conn.execute(delete(messages).where(where)).rowcount
        self.conn.execute(
            update(queues)
            .where(q.topic == topic, q.queue_id == queue_id, q.min_offset < end)
            .values(min_offset=end)
        )
        return {"messages": gone, "message_keys": keys}

    def expire_position(
        self, group: str, client_id: str, topic: str, queue_id: int, end: int, now: int
    ) -> int:
        """Move the position up to ``end`` and count the offsets it moved past.

        A compare-and-set on the offset read: on PostgreSQL another broker's ack can commit
        between the read and the update (READ COMMITTED), and an update that did not check would
        move the position back below what the ack passed and count what the ack had consumed
        as expired.  Here the update matches only the offset read; when it matches nothing the
        position is read again, and one that is at ``end`` or past it is left alone."""
        where = and_(
            o.consumer_group == group,
            o.topic == topic,
            o.queue_id == queue_id,
            o.client_id == client_id,
        )
        for _ in range(_EXPIRE_TRIES):
            committed = self.conn.execute(select(o.committed_offset).where(where)).scalar()
            if committed is None or committed >= end:
                return 0
            moved = self.conn.execute(
                update(consumer_offsets)
                .where(where, o.committed_offset == committed)
                .values(
                    expired=o.expired + (end - committed),
                    committed_offset=end,
                    pulled_offset=case(
                        (o.pulled_offset < end, literal(end)), else_=o.pulled_offset
                    ),
                    updated_at=now,
                )
                # RETURNING, not the row count: a writer batch may run in pipeline mode.
                .returning(o.committed_offset)
            ).first()
            if moved is not None:
                break
        else:
            # Rolls the purge unit back (nothing deleted); the next round tries again.
            raise Busy(
                f"the position of {group} in {topic} queue {queue_id} kept moving while the "
                "purge expired it",
                code="PURGE_RACE",
            )
        open_ = and_(
            d.consumer_group == group,
            d.topic == topic,
            d.queue_id == queue_id,
            d.queue_offset < end,
            OPEN,
        )
        if client_id:
            open_ = and_(open_, d.client_id == client_id)
        self.conn.execute(
            update(deliveries)
            .where(open_)
            .values(state=DeliveryState.EXPIRED.value, finished_at=now)
        )
        return end - int(committed)

    def purge_transactions(
        self, before: int, limit: int | None, now: int, *, dry_run: bool = False
    ) -> dict[str, int]:
        # Created before it too (resolved_at >= created_at), said for the created_at index.
        old = and_(t.state.in_(_RESOLVED), t.created_at < before, t.resolved_at < before)
        if dry_run:
            # What the purge would delete with them: their half, op record and parked copy
            # (by the partial transaction_id index), and those rows' key rows.
            resolved = select(t.transaction_id).where(old).scalar_subquery()
            theirs = and_(m.transaction_id.in_(resolved), m.topic.in_(_HALF_TOPICS))
            keyed = messages.join(
                message_keys,
                and_(
                    k.topic == m.topic, k.queue_id == m.queue_id, k.queue_offset == m.queue_offset
                ),
            )
            count = self.conn.execute(
                select(
                    select(func.count()).select_from(transactions).where(old).scalar_subquery(),
                    select(func.count()).where(theirs).scalar_subquery(),
                    select(func.count()).select_from(keyed).where(theirs).scalar_subquery(),
                )
            ).one()
            return {
                "transactions": int(count[0]),
                "messages": int(count[1]),
                "message_keys": int(count[2]),
            }
        done = list(
            self.conn.execute(
                # No ORDER BY: the planner would sort every old row for each batch; any will do.
                select(t.transaction_id, t.msg_id).where(old).limit(limit)
            )
        )
        if not done:
            return {"transactions": 0}
        ids = [r.transaction_id for r in done]
        theirs = and_(m.transaction_id.in_(ids), m.topic.in_(_HALF_TOPICS))
        rows = list(
            self.conn.execute(select(m.id, m.topic, m.queue_id, m.queue_offset).where(theirs))
        )
        keys = 0
        if rows:
            keys = self.conn.execute(
                delete(message_keys).where(
                    tuple_(k.topic, k.queue_id, k.queue_offset).in_(
                        [(r.topic, r.queue_id, r.queue_offset) for r in rows]
                    )
                )
            ).rowcount
            self.conn.execute(delete(messages).where(m.id.in_([r.id for r in rows])))
            self._raise_min_offsets({(r.topic, r.queue_id) for r in rows})
        self._remember("t", ids, now)
        self._remember("m", (r.msg_id for r in done), now)
        self.conn.execute(delete(transactions).where(t.transaction_id.in_(ids)))
        return {"transactions": len(ids), "messages": len(rows), "message_keys": keys}

    def _raise_min_offsets(self, touched: Iterable[tuple[str, int]]) -> None:
        """A queue that loses rows one by one: its min_offset is its oldest row's offset."""
        for topic, queue_id in sorted(touched):
            oldest = select(func.min(m.queue_offset)).where(
                m.topic == topic, m.queue_id == queue_id
            )
            self.conn.execute(
                update(queues)
                .where(q.topic == topic, q.queue_id == queue_id)
                .values(min_offset=func.coalesce(oldest.scalar_subquery(), q.next_offset))
            )

    def purge_released_delayed(self, purge: DelayedPurge) -> dict[str, int]:
        """A bounded range of the unique index (``purge.end_from``), however many messages still
        waiting come before it.  The purge walks a schedule queue range by range
        (RetentionService._delayed): a queue's head can wait for days (an explicit
        ``deliver_at``) while the messages behind it are released."""
        topic, queue_id = purge.topic, purge.queue_id
        done = and_(
            m.released_at.is_not(None),
            m.released_at < purge.released_before,
            m.stored_at < purge.stored_before,
        )
        if purge.dry_run:
            n = self.conn.execute(
                select(func.count()).where(m.topic == topic, m.queue_id == queue_id, done)
            )
            return {"messages": int(n.scalar_one())}
        start = purge.start
        if start is None:
            start = self.conn.execute(
                select(q.min_offset).where(q.topic == topic, q.queue_id == queue_id)
            ).scalar()
            if start is None:
                return {"messages": 0}
        chosen = (
            select(m.id)
            .where(_in_queue(topic, queue_id, start, purge.end_from(start)), done)
            .order_by(m.queue_offset)
            .limit(purge.limit)
            .scalar_subquery()
        )
        gone = self.conn.execute(delete(messages).where(m.id.in_(chosen))).rowcount
        if gone:
            self._raise_min_offsets([(topic, queue_id)])
        return {"messages": gone}

    def purge_deliveries(self, purge: DeliveryPurge) -> int:
        old = and_(
            d.state.in_(_FINISHED),
            d.delivered_at < purge.delivered_before,
            d.finished_at < purge.finished_before,
        )
        return self._bounded(deliveries.c.id, deliveries.c.id, old, purge.limit, purge.dry_run)

    def purge_trace(self, before: int, limit: int | None, *, dry_run: bool = False) -> int:
        key = trace_events.c.id
        return self._bounded(key, key, trace_events.c.at < before, limit, dry_run)

    def purge_purged_ids(self, before: int, limit: int | None, *, dry_run: bool = False) -> int:
        p = purged_ids.c
        return self._bounded(p.id_hash, p.purged_at, p.purged_at < before, limit, dry_run)

    def _bounded(
        self,
        key: Any,
        order: Any,
        where: ColumnElement[bool],
        limit: int | None,
        dry_run: bool,
    ) -> int:
        """Delete (count, ``dry_run``) up to ``limit`` rows matching ``where``, taken in the order
        of the indexed ``order`` (the old ones come first, so the scan stops soon)."""
        table = key.table
        if dry_run:
            return int(
                self.conn.execute(select(func.count()).select_from(table).where(where)).scalar_one()
            )
        chosen = select(key).where(where).order_by(order).limit(limit).scalar_subquery()
        return int(self.conn.execute(delete(table).where(key.in_(chosen))).rowcount)

    def compact(self) -> int:
        """SQLite: give free pages back to the file system (incremental vacuum) once a quarter of
        the file is free, down to an eighth kept for new rows, at most ``_VACUUM_STEP`` pages a
        call (a short turn in the writer).  PostgreSQL: autovacuum's job (VACUUM cannot run in a
        transaction)."""
        if self._postgres:
            return 0
        pages = int(self.conn.exec_driver_sql("PRAGMA page_count").scalar_one())
        free = int(self.conn.exec_driver_sql("PRAGMA freelist_count").scalar_one())
        if free * 4 < pages:
            return 0
        give = min(free - pages // _PAGES_KEPT, _VACUUM_STEP)
        # The driver steps a pragma once, and each step of incremental_vacuum frees one page:
        # it is executed once per page, on the writer's connection, inside its transaction.
        cursor = self.conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            for _ in range(give):
                cursor.execute("PRAGMA incremental_vacuum")
        finally:
            cursor.close()
        return give

    # -- what an operator asks -------------------------------------------------------------------

    def store_stats(self, export_watermark: str, *, count_rows: bool = True) -> StoreStats:
        rows = {
            name: int(
                self.conn.execute(
                    select(func.count()).select_from(metadata.tables[name])
                ).scalar_one()
            )
            for name in (TABLES if count_rows else ())
        }
        if self._postgres:
            size = sum(
                int(
                    self.conn.execute(
                        select(func.pg_total_relation_size(literal(table.name)))
                    ).scalar_one()
                )
                for table in metadata.sorted_tables
            )
            free = 0
        else:
            page = int(self.conn.exec_driver_sql("PRAGMA page_size").scalar_one())
            size = page * int(self.conn.exec_driver_sql("PRAGMA page_count").scalar_one())
            free = page * int(self.conn.exec_driver_sql("PRAGMA freelist_count").scalar_one())
        oldest = [
            h.oldest_stored_at
            for h in self.queue_heads()
            if h.oldest_stored_at is not None and is_prefix_queue(h.topic)
        ]
        expired = {
            r.consumer_group: int(r.n)
            for r in self.conn.execute(
                select(o.consumer_group, func.sum(o.expired).label("n"))
                .where(o.expired > 0)
                .group_by(o.consumer_group)
            )
        }
        return StoreStats(
            size_bytes=size,
            free_bytes=free,
            rows=rows,
            oldest_message_at=min(oldest, default=None),
            export_watermark=self.export_watermark(export_watermark),
            expired=expired,
        )

    # -- lookups --------------------------------------------------------------------------------

    def purged_at(self, kind: str, ids: Sequence[str]) -> int | None:
        if not ids:
            return None
        p = purged_ids.c
        hashes = [id_hash(kind, value) for value in ids]
        value = self.conn.execute(select(func.max(p.purged_at)).where(p.id_hash.in_(hashes)))
        found = value.scalar()
        return None if found is None else int(found)
