"""``SqlTx``: the domain's :class:`StoreTx` on one SQLAlchemy connection and transaction.

Appends are written behind: they are buffered during a batch of units of work and written by
:meth:`SqlTx.flush` with bulk inserts (``store/bulk.py``; plain messages with fewer columns).
``flush`` locks the touched queue rows in a fixed order (``FOR UPDATE`` on PostgreSQL; SQLite's
writer holds the database lock already), hands out dense offsets, and only then inserts -- so
offsets stay gap-free even with several brokers on one PostgreSQL, and every caller learns its
offsets before its commit is acknowledged.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, delete, func, insert, select

from broker_service.domain.messages.model import (
    PendingMessage,
    PlainBatch,
    QueueInfo,
    StoredMessage,
    Topic,
)
from broker_service.domain.ports import (
    MessageQuery,
    ResolveOutcome,
    TransactionEnd,
    TransactionQuery,
)
from broker_service.domain.transactions.model import TransactionRecord
from broker_service.store import rows
from broker_service.store import statements as sql
from broker_service.store.acl import AclPart
from broker_service.store.audit import AuditPart
from broker_service.store.break_statuses import BreakStatusPart
from broker_service.store.brokers import BrokerPart
from broker_service.store.checks import CheckPart
from broker_service.store.clients import ClientPart
from broker_service.store.consumers import GroupPart
from broker_service.store.deliveries import DeliveryPart
from broker_service.store.fastpath import driver_errors
from broker_service.store.progress import ProgressPart
from broker_service.store.retention import RetentionPart
from broker_service.store.schema import (
    message_keys,
    messages,
    queues,
    transactions,
)
from broker_service.store.schema import topics as topic_table

_queue_of = operator.attrgetter("topic", "queue_id")

_IDS_A_QUERY = 500  # ids in one IN (...) of find_messages_of


def _count(appended: PendingMessage | PlainBatch) -> int:
    return len(appended.msg_ids) if isinstance(appended, PlainBatch) else 1


@dataclass(frozen=True, slots=True)
class Mark:
    """Where the buffers stood before a unit of work, to drop what a failed unit appended."""

    appended: int
    transactions: int
    resolutions: int


class ResolutionRace(Exception):
    """A resolution deferred to the flush found its transaction resolved by someone else since
    its unit read it: the batch is rolled back, and the writer runs it again undeferred."""


class SqlTx(
    BreakStatusPart,
    GroupPart,
    ProgressPart,
    DeliveryPart,
    CheckPart,
    AclPart,
    RetentionPart,
    AuditPart,
    BrokerPart,
    ClientPart,
):
    def __init__(self, conn: Connection, *, defer_resolutions: bool = False) -> None:
        """``defer_resolutions`` (PostgreSQL; the writer sets it for a batch of several units):
        see :meth:`resolve_transaction`."""
        self.conn = conn
        self._postgres = conn.dialect.name == "postgresql"
        self._defer_resolutions = defer_resolutions and self._postgres
        self._resolutions: dict[str, dict[str, Any]] = {}  # by transaction id, in order
        self._topics: dict[str, Topic | None] = {}
        self._appended: list[PendingMessage | PlainBatch] = []
        self._sent: dict[str, PendingMessage] = {}
        self._transactions: list[tuple[TransactionRecord, PendingMessage]] = []
        # Transactions (with their halves) looked up ahead for the units of a batch; each is
        # used once, so that a second look at the same transaction asks the store again.
        self._read_ahead: dict[str, dict[str, Any] | None] = {}
        # Earlier sends looked up ahead by dedup key for the units of a batch (None: none was
        # stored).  Kept exact for the whole batch: what the batch flushes is entered here, and a
        # purge of messages in the batch drops it all (see read_ahead_sent).
        self._sent_ahead: dict[str, StoredMessage | PendingMessage | None] = {}
        self.held_progress = {}

    # -- buffers --------------------------------------------------------------------------------

    def mark(self) -> Mark:
        return Mark(len(self._appended), len(self._transactions), len(self._resolutions))

    def rollback_to(self, mark: Mark) -> None:
        for message in self._appended[mark.appended :]:
            if isinstance(message, PendingMessage) and message.dedup_key is not None:
                self._sent.pop(message.dedup_key, None)
        del self._appended[mark.appended :]
        del self._transactions[mark.transactions :]
        for transaction_id in list(self._resolutions)[mark.resolutions :]:
            del self._resolutions[transaction_id]

    def flush(self) -> None:
        """Hand out offsets and write everything appended since the last flush."""
        self._flush_resolutions()
        if self._appended:
            pending, self._appended = self._appended, []
            self._assign_offsets(pending)
            for plain, run in rows.message_runs(pending):
                insert = sql.insert_plain_messages if plain else sql.insert_messages
                insert.execute(self.conn, run)
            sql.insert_message_keys.execute(
                self.conn,
                [
                    (key, m.stored_at, m.topic, m.queue_id, m.queue_offset)
                    for m in pending
                    if isinstance(m, PendingMessage) and m.keys
                    for key in dict.fromkeys(m.keys)
                ],
            )
            if self._sent_ahead:  # now stored: what the store would answer for them
                self._sent_ahead.update(self._sent)
            self._sent.clear()
        if self._transactions:
            records, self._transactions = self._transactions, []
            sql.insert_transactions.execute(
                self.conn,
                [rows.transaction_row(record, half.queue_offset) for record, half in records],
            )

    def _assign_offsets(self, pending: list[PendingMessage | PlainBatch]) -> None:
        # The messages in runs of one queue (a batch's plain messages share one), counted per
        # queue, so offsets are taken once per queue and handed out per run.
        runs = [(key, list(run)) for key, run in itertools.groupby(pending, _queue_of)]
        counts: dict[tuple[str, int], int] = {}
        for key, run in runs:
            counts[key] = counts.get(key, 0) + sum(map(_count, run))
        first = self._take_offsets(counts)
        for key, run in runs:
            offset = first[key]
            for message in run:
                if isinstance(message, PlainBatch):
                    message.first_offset = offset
                    offset += len(message.msg_ids)
                else:
                    message.queue_offset = offset
                    offset += 1
            first[key] = offset

    def _take_offsets(self, counts: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The first of ``counts[key]`` offsets taken in each queue.  SQLite (its writer holds the
        database lock): one ``UPDATE ... FROM (VALUES ...) RETURNING`` for all.  PostgreSQL locks
        the queues in a fixed (sorted) order, so brokers sharing it cannot deadlock: one ``UPDATE
        ... RETURNING`` for a single queue, else one locking SELECT and one UPDATE for all."""
        wanted = sorted(counts)
        first: dict[tuple[str, int], int] = {}
        if not self._postgres:
            first = self._take_offsets_sqlite(wanted, counts)
        elif len(wanted) == 1:
            key = wanted[0]
            row = sql.take_offsets.first(self.conn, {"t": key[0], "q": key[1], "n": counts[key]})
            if row is not None:
                first[key] = int(row["next_offset"]) - counts[key]
        wanted = [key for key in wanted if key not in first]
        if not wanted:
            return first
        next_offsets = self._lock_queues(wanted)
        missing = [key for key in wanted if key not in next_offsets]
        if missing:  # a queue without its row yet: make it
            self._insert_queues(missing)
            next_offsets.update(self._lock_queues(missing))
        moved = [(t, q, n + counts[(t, q)]) for (t, q), n in next_offsets.items()]
        if self._postgres:
            topics, queue_ids, offsets = (list(column) for column in zip(*moved, strict=True))
            params = {"topics": topics, "queue_ids": queue_ids, "offsets": offsets}
            self.conn.execute(sql.set_next_offsets_pg, params)
        else:
            self.conn.execute(sql.set_next_offset, [{"t": t, "q": q, "n": n} for t, q, n in moved])
        first.update(next_offsets)
        return first

    def _take_offsets_sqlite(
        self, wanted: list[tuple[str, int]], counts: dict[tuple[str, int], int]
    ) -> dict[tuple[str, int], int]:
        statement = sql.take_offsets_sqlite(len(wanted))
        values = [value for key in wanted for value in (key[0], key[1], counts[key])]
        cursor = self.conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            with driver_errors(self.conn, statement):
                cursor.execute(statement, values)
                taken = cursor.fetchall()
        finally:
            cursor.close()
        return {(t, q): next_offset - counts[(t, q)] for t, q, next_offset in taken}

    def _lock_queues(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        query = sql.queues_by_keys_for_update if self._postgres else sql.queues_by_keys
        result = self.conn.execute(query, {"keys": list(keys)})
        return {(r.topic, r.queue_id): r.next_offset for r in result}

    def _insert_queues(self, keys: Sequence[tuple[str, int]]) -> None:
        self.conn.execute(
            self._insert()(queues).on_conflict_do_nothing(),
            [{"topic": t, "queue_id": q, "next_offset": 0, "min_offset": 0} for t, q in keys],
        )

    # -- topics and queues ----------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic | None:
        if name not in self._topics:
            row = sql.topic_by_name.first(self.conn, {"name": name})
            self._topics[name] = rows.topic_record(row) if row else None
        return self._topics[name]

    def list_topics(self) -> list[Topic]:
        result = self.conn.execute(
            select(topic_table).where(topic_table.c.system.is_(False)).order_by(topic_table.c.name)
        )
        return [rows.topic_record(row) for row in result]

    def create_topic(self, topic: Topic) -> None:
        self.conn.execute(
            insert(topic_table).values(
                name=topic.name,
                queues=topic.queues,
                ordered=topic.ordered,
                perm=topic.perm,
                system=topic.system,
                created_at=topic.created_at,
            )
        )
        # Queues outlive a deleted topic, so a topic created again continues its offsets.
        self._insert_queues([(topic.name, i) for i in range(topic.queues)])
        self._topics[topic.name] = topic

    def delete_topic(self, name: str) -> None:
        self.conn.execute(delete(topic_table).where(topic_table.c.name == name))
        self._topics[name] = None

    def queue_infos(self, topic: str) -> list[QueueInfo]:
        result = self.conn.execute(
            select(queues).where(queues.c.topic == topic).order_by(queues.c.queue_id)
        )
        return [QueueInfo(topic, r.queue_id, r.min_offset, r.next_offset) for r in result]

    # -- messages -------------------------------------------------------------------------------

    def append(self, message: PendingMessage) -> None:
        self.append_all((message,))

    def append_all(self, messages: Sequence[PendingMessage]) -> None:
        self._appended.extend(messages)
        for message in messages:
            if message.dedup_key is not None:
                self._sent[message.dedup_key] = message

    def append_batch(self, batch: PlainBatch) -> None:
        # Nothing to register: a plain batch has no client-made ids to dedup, no transaction.
        self._appended.append(batch)

    def find_sent(self, dedup_keys: Sequence[str]) -> dict[str, StoredMessage | PendingMessage]:
        found: dict[str, StoredMessage | PendingMessage] = {}
        rest: list[str] = []
        ahead = self._sent_ahead
        for k in dedup_keys:
            if k in self._sent:
                found[k] = self._sent[k]
            elif k in ahead:
                earlier = ahead[k]
                if earlier is not None:
                    found[k] = earlier
            else:
                rest.append(k)
        if rest:
            result = self.conn.execute(sql.sent_by_dedup_keys, {"keys": rest})
            for row in result:
                found[row.dedup_key] = rows.stored_message(row)
        return found

    def read_ahead_sent(self, dedup_keys: Sequence[str]) -> None:
        """Look up in one statement the earlier sends the units of a batch will look for by dedup
        key (``find_sent``: a half's or a send's client-made ``msg_id``), where each was one
        SELECT of its own, a large share of the writer's time on batched halves (bench/README.md,
        "Request batching", where the writer's time went).  Exact for the whole
        batch: it runs in the writer's transaction (on SQLite under its write lock; on
        PostgreSQL another broker's insert of the same key meets the unique index, as it would
        after a lookup of its own), what the batch stores is entered as it is flushed, and a
        purge of messages forgets it all."""
        self._look_ahead(
            sql.sent_by_dedup_keys_ahead,
            "dedup_key",
            dedup_keys,
            self._sent_ahead,
            rows.stored_message,
        )

    def _look_ahead(
        self,
        lookup: sql.ByKeys,
        column: str,
        keys: Sequence[str],
        known: dict[str, Any],
        value: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        """Enter in ``known`` each of ``keys`` it lacks: its row (``value`` of it), None if
        there is none."""
        wanted = [k for k in dict.fromkeys(keys) if k not in known]
        if not wanted:
            return
        found_rows = lookup.all(self.conn, self._postgres, wanted)
        if value is None:
            found = {row[column]: row for row in found_rows}
        else:
            found = {row[column]: value(row) for row in found_rows}
        for key in wanted:
            known[key] = found.get(key)

    def purge_queue_head(self, *args: Any, **kwargs: Any) -> Any:
        self._sent_ahead.clear()  # messages deleted: ask the store again
        return super().purge_queue_head(*args, **kwargs)

    def purge_transactions(self, *args: Any, **kwargs: Any) -> Any:
        self._sent_ahead.clear()
        return super().purge_transactions(*args, **kwargs)

    def purge_released_delayed(self, *args: Any, **kwargs: Any) -> Any:
        self._sent_ahead.clear()
        return super().purge_released_delayed(*args, **kwargs)

    def get_message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        params = {"topic": topic, "queue_id": queue_id, "offset": offset}
        row = sql.message_at.first(self.conn, params)
        return rows.stored_message(row) if row else None

    def find_messages(self, msg_id: str) -> list[StoredMessage]:
        result = self.conn.execute(sql.messages_by_msg_id, {"msg_id": msg_id})
        return [rows.stored_message(row) for row in result]

    def find_messages_of(self, msg_ids: Sequence[str]) -> dict[str, list[StoredMessage]]:
        found: dict[str, list[StoredMessage]] = {}
        for start in range(0, len(msg_ids), _IDS_A_QUERY):
            chunk = list(dict.fromkeys(msg_ids[start : start + _IDS_A_QUERY]))
            for row in self.conn.execute(sql.messages_by_msg_ids, {"msg_ids": chunk}):
                message = rows.stored_message(row)
                found.setdefault(message.msg_id, []).append(message)
        return found

    def query_messages(self, query: MessageQuery) -> list[StoredMessage]:
        if query.key is not None:
            k = message_keys.c
            conditions: list[Any] = [k.key == query.key]
            if query.topic is not None:
                conditions.append(k.topic == query.topic)
            else:  # halves, op records and parked copies only when their topic is asked for
                conditions.append(k.topic.not_like("RMQ\\_SYS\\_%", escape="\\"))
            if query.begin is not None:
                conditions.append(k.stored_at >= query.begin)
            if query.end is not None:
                conditions.append(k.stored_at <= query.end)
            stmt = (
                select(messages)
                .join(
                    message_keys,
                    and_(
                        k.topic == messages.c.topic,
                        k.queue_id == messages.c.queue_id,
                        k.queue_offset == messages.c.queue_offset,
                    ),
                )
                .where(*conditions)
                .order_by(k.stored_at, messages.c.id)
            )
        else:
            m = messages.c
            conditions = []
            if query.topic is not None:
                conditions.append(m.topic == query.topic)
            else:
                conditions.append(m.topic.not_like("RMQ\\_SYS\\_%", escape="\\"))
            if query.begin is not None:
                conditions.append(m.stored_at >= query.begin)
            if query.end is not None:
                conditions.append(m.stored_at <= query.end)
            stmt = select(messages).where(*conditions).order_by(m.stored_at, m.id)
        result = self.conn.execute(stmt.limit(query.limit))
        return [rows.stored_message(row) for row in result]

    def claim_due_delayed(self, topic: str, now: int, limit: int) -> list[StoredMessage]:
        query = sql.due_delayed_locked if self._postgres else sql.due_delayed
        result = self.conn.execute(query, {"topic": topic, "now": now, "limit": limit})
        return [rows.stored_message(row) for row in result]

    def mark_released(self, message_id: int, at: int) -> None:
        self.conn.execute(sql.mark_released, {"b_id": message_id, "b_at": at})

    def next_delayed_at(self, topic: str) -> int | None:
        value = self.conn.execute(sql.next_delayed, {"topic": topic}).scalar()
        return None if value is None else int(value)

    def real_message_of(
        self, transaction_id: str, topic: str
    ) -> StoredMessage | PendingMessage | None:
        for message in self._appended:
            if (
                isinstance(message, PendingMessage)
                and message.transaction_id == transaction_id
                and message.topic == topic
            ):
                return message
        params = {"transaction_id": transaction_id, "topic": topic}
        row = sql.message_of_transaction.first(self.conn, params)
        return rows.stored_message(row) if row else None

    # -- transactions ---------------------------------------------------------------------------

    def insert_transaction(self, record: TransactionRecord, half: PendingMessage) -> None:
        self._transactions.append((record, half))

    def get_transaction(self, transaction_id: str) -> TransactionRecord | None:
        if transaction_id in self._resolutions:
            self._flush_resolutions()
        for record, _half in self._transactions:
            if record.transaction_id == transaction_id:
                return record
        params = {"transaction_id": transaction_id}
        row = self.conn.execute(sql.transaction_by_id, params).first()
        return rows.transaction_record(row) if row else None

    def _write_if_buffered(self, transaction_id: str) -> None:
        """A transaction whose half (or resolution) is in this very batch is written before SQL
        looks for it."""
        if any(r.transaction_id == transaction_id for r, _ in self._transactions):
            self.flush()
            self._read_ahead.pop(transaction_id, None)  # looked up before it was written
        elif transaction_id in self._resolutions:
            self._flush_resolutions()

    def claim_due_transactions(self, now: int, limit: int) -> list[TransactionRecord]:
        self._flush_resolutions()  # not a transaction this batch has resolved
        return super().claim_due_transactions(now, limit)

    def pending_pull_checks(
        self, group: str, client_id: str, limit: int
    ) -> list[TransactionRecord]:
        self._flush_resolutions()
        return super().pending_pull_checks(group, client_id, limit)

    def _flush_resolutions(self) -> None:
        if not self._resolutions:
            return
        # In id order, so that brokers sharing the database lock the rows in one order.
        pending = [self._resolutions[t] for t in sorted(self._resolutions)]
        self._resolutions = {}
        if sql.resolve_transaction.rowcount_many(self.conn, pending) != len(pending):
            raise ResolutionRace(f"{len(pending)} resolutions deferred, some lost their race")

    def read_ahead(self, transaction_ids: Sequence[str]) -> None:
        """Look up in one statement the transactions the units of a batch are about to resolve:
        on PostgreSQL each lookup is a round trip the group-commit writer would wait for in turn."""
        self._look_ahead(
            sql.transactions_with_halves, "transaction_id", transaction_ids, self._read_ahead
        )

    def transaction_with_half(
        self, transaction_id: str
    ) -> tuple[TransactionRecord, StoredMessage | None] | None:
        self._write_if_buffered(transaction_id)
        if transaction_id in self._read_ahead:
            row = self._read_ahead.pop(transaction_id)
        else:
            params = {"transaction_id": transaction_id}
            lookup = sql.transaction_with_half_pg if self._postgres else sql.transaction_with_half
            row = lookup.first(self.conn, params)
        if row is None:
            return None
        half = rows.stored_message(row, "m_") if row["m_id"] is not None else None
        return rows.transaction_record(row), half

    def list_transactions(self, query: TransactionQuery) -> list[TransactionRecord]:
        t = transactions.c
        conditions: list[Any] = []
        if query.state is not None:
            conditions.append(t.state == query.state.value)
        if query.producer_group is not None:
            conditions.append(t.producer_group == query.producer_group)
        if query.created_before is not None:
            conditions.append(t.created_at <= query.created_before)
        result = self.conn.execute(
            select(transactions).where(*conditions).order_by(t.created_at).limit(query.limit)
        )
        return [rows.transaction_record(row) for row in result]

    def resolve_transaction(self, end: TransactionEnd) -> ResolveOutcome:
        """The conditional update that moves a transaction out of its open state.  Deferred
        (``defer_resolutions``), the updates of a batch's units go to PostgreSQL together when the
        batch is flushed -- one round trip where each was one of its own, the writer's longest
        wait on the transactions load -- and this answers ``DEFERRED`` at once (the port's terms:
        the unit has just read the transaction open).  The flush then checks that every update
        changed its row; if another broker resolved one in between, the flush raises
        :class:`ResolutionRace` and the writer runs the batch again undeferred, so that the unit
        that lost answers from what the store holds.  A later look at the same transaction in the
        batch (a resolve, a check-back claim or pull) writes the pending updates first."""
        self._write_if_buffered(end.transaction_id)
        params = {
            "b_transaction_id": end.transaction_id,
            "b_state": end.state.value,
            "b_at": end.at,
            "b_by": end.by.value,
            "b_client": end.client,
        }
        if self._defer_resolutions:
            self._resolutions[end.transaction_id] = params
            return ResolveOutcome.DEFERRED
        if sql.resolve_transaction.rowcount(self.conn, params) == 1:
            return ResolveOutcome.RESOLVED
        return ResolveOutcome.NOT_OPEN

    def count_messages(self) -> int:
        return int(self.conn.execute(select(func.count()).select_from(messages)).scalar_one())
