"""The store's statements, built once: SQLAlchemy then only looks up its compiled form per call
(building a statement per call costs more than running it on SQLite: bench/README.md, "Figures,
first round", the hot statements precompiled)."""

from __future__ import annotations

import functools
from typing import Any

import orjson
from sqlalchemy import (
    BigInteger,
    Connection,
    String,
    and_,
    any_,
    bindparam,
    func,
    literal_column,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ColumnElement, FromClause, Select

from broker_service.domain.names import HALF_TOPIC
from broker_service.store.bulk import BulkInsert
from broker_service.store.fastpath import Prepared
from broker_service.store.rows import (
    MESSAGE_COLUMNS,
    PLAIN_MESSAGE_COLUMNS,
    TRANSACTION_COLUMNS,
)
from broker_service.store.schema import (
    message_keys,
    messages,
    queues,
    topics,
    transactions,
)

OPEN_STATES = ("PREPARED", "DISCARDED")
# Spelled out: an IN list of literals compiles to a per-call expanding parameter.
OPEN_STATE = text("transactions.state IN ('PREPARED', 'DISCARDED')")


class ByKeys:
    """``base`` for many values of its string ``column`` at once, compiled once: the values as
    one array on PostgreSQL (``= ANY``; ``pg_base`` there, if it has a form of its own), as one
    JSON array on SQLite (``IN json_each``)."""

    def __init__(
        self, base: Select[Any], column: ColumnElement[Any], pg_base: Select[Any] | None = None
    ) -> None:
        listed: Select[Any] = select(literal_column("value")).select_from(
            func.json_each(bindparam("json"))
        )
        self.sqlite = Prepared(base.where(column.in_(listed)))
        keys = bindparam("keys", type_=postgresql.ARRAY(String))
        self.pg = Prepared((base if pg_base is None else pg_base).where(column == any_(keys)))

    def all(self, conn: Connection, postgres: bool, keys: list[str]) -> list[dict[str, Any]]:
        if postgres:
            return self.pg.all(conn, {"keys": keys})
        return self.sqlite.all(conn, {"json": orjson.dumps(keys).decode()})


def queue_from(*columns: Any) -> Prepared:
    """``columns`` of the messages of queue ``:topic``/``:queue`` from offset ``:offset`` on,
    oldest first, at most ``:limit``: a queue read from an offset (a consumer's, the purge's)."""
    m = messages.c
    return Prepared(
        select(*columns)
        .where(
            m.topic == bindparam("topic"),
            m.queue_id == bindparam("queue"),
            m.queue_offset >= bindparam("offset"),
        )
        .order_by(m.queue_offset)
        .limit(bindparam("limit"))
    )


# What a half leaving check-back (resolved, discarded) sets: no next check, no claim, no pull.
OUT_OF_CHECKS: dict[str, Any] = {
    "next_check_at": None,
    "claimed_by": None,
    "claimed_until": None,
    "check_pending_pull": False,
}

topic_by_name = Prepared(select(topics).where(topics.c.name == bindparam("name")))

queues_by_keys = (
    select(queues.c.topic, queues.c.queue_id, queues.c.next_offset)
    .where(tuple_(queues.c.topic, queues.c.queue_id).in_(bindparam("keys", expanding=True)))
    .order_by(queues.c.topic, queues.c.queue_id)
)
queues_by_keys_for_update = queues_by_keys.with_for_update()

set_next_offset = (
    update(queues)
    .where(and_(queues.c.topic == bindparam("t"), queues.c.queue_id == bindparam("q")))
    .values(next_offset=bindparam("n"))
)
# PostgreSQL: every queue's new next offset in one statement (psycopg's executemany would send
# one UPDATE per queue); the rows are already locked by queues_by_keys_for_update.
set_next_offsets_pg = text(
    "UPDATE queues SET next_offset = v.next_offset"
    " FROM unnest(CAST(:topics AS VARCHAR[]), CAST(:queue_ids AS INTEGER[]),"
    " CAST(:offsets AS BIGINT[])) AS v(topic, queue_id, next_offset)"
    " WHERE queues.topic = v.topic AND queues.queue_id = v.queue_id"
)

# One queue (a single send, a half, a commit): take ``n`` offsets in one statement; the row lock
# the UPDATE takes is the queue's lock until commit, as with queues_by_keys_for_update.
take_offsets = Prepared(
    update(queues)
    .where(and_(queues.c.topic == bindparam("t"), queues.c.queue_id == bindparam("q")))
    .values(next_offset=queues.c.next_offset + bindparam("n", type_=BigInteger))
    .returning(queues.c.next_offset)
)


@functools.cache
def take_offsets_sqlite(queue_count: int) -> str:
    """SQLite: take offsets in ``queue_count`` queues in one statement, parameters ``(topic,
    queue_id, n)`` per queue; rows ``(topic, queue_id, next_offset)`` for the queues that exist.
    One call into the library instead of one per queue: the writer lets go of the GIL in each
    call and then waits to get it back while the event loop validates a batch."""
    values = ", ".join(["(?, ?, ?)"] * queue_count)
    return (
        "UPDATE queues SET next_offset = queues.next_offset + v.column3"
        f" FROM (VALUES {values}) AS v"
        " WHERE queues.topic = v.column1 AND queues.queue_id = v.column2"
        " RETURNING topic, queue_id, next_offset"
    )


insert_messages = BulkInsert(messages, MESSAGE_COLUMNS)
insert_plain_messages = BulkInsert(messages, PLAIN_MESSAGE_COLUMNS)
insert_message_keys = BulkInsert(
    message_keys, ("key", "stored_at", "topic", "queue_id", "queue_offset")
)
insert_transactions = BulkInsert(transactions, TRANSACTION_COLUMNS)

sent_by_dedup_keys = select(messages).where(
    messages.c.dedup_key.in_(bindparam("keys", expanding=True))
)

# The same for every dedup key a group commit's units will look for (see SqlTx.read_ahead_sent).
sent_by_dedup_keys_ahead = ByKeys(select(messages), messages.c.dedup_key)

message_at = Prepared(
    select(messages).where(
        messages.c.topic == bindparam("topic"),
        messages.c.queue_id == bindparam("queue_id"),
        messages.c.queue_offset == bindparam("offset"),
    )
)

messages_by_msg_id = (
    select(messages).where(messages.c.msg_id == bindparam("msg_id")).order_by(messages.c.id)
)
messages_by_msg_ids = (
    select(messages)
    .where(messages.c.msg_id.in_(bindparam("msg_ids", expanding=True)))
    .order_by(messages.c.id)
)

message_of_transaction = Prepared(
    select(messages).where(
        messages.c.transaction_id == bindparam("transaction_id"),
        messages.c.topic == bindparam("topic"),
    )
)

# A transaction and its half in one lookup (the half's columns prefixed "m_").
_half_of_transaction = and_(
    messages.c.topic == HALF_TOPIC,
    messages.c.queue_id == 0,
    messages.c.queue_offset == transactions.c.half_offset,
)


def _transaction_and(half: FromClause, on: ColumnElement[bool]) -> Select[Any]:
    return select(transactions, *[c.label(f"m_{c.name}") for c in half.c]).select_from(
        transactions.outerjoin(half, on)
    )


_transaction_and_half = _transaction_and(messages, _half_of_transaction)
# PostgreSQL: the half through a LATERAL subquery with LIMIT 1 (the key is unique anyway), which
# the planner cannot flatten into a join.  As a plain join, with statistics taken while the
# tables were small (a new store under load, before autovacuum's first ANALYZE), it planned the
# half topic's queue as one row, read all of it once and filtered it for every transaction: the
# group-commit writer's longest wait, where the lateral lookup is one index probe per transaction
# (bench/README.md, "Figures, fifth round", the half through a LIMIT-1 lateral lookup).
_transaction_and_half_pg = _transaction_and(
    select(messages).where(_half_of_transaction).limit(1).lateral("m"), true()
)
transaction_with_half = Prepared(
    _transaction_and_half.where(transactions.c.transaction_id == bindparam("transaction_id"))
)
transaction_with_half_pg = Prepared(
    _transaction_and_half_pg.where(transactions.c.transaction_id == bindparam("transaction_id"))
)
# The same for every transaction a group commit's units will resolve (see SqlTx.read_ahead).
transactions_with_halves = ByKeys(
    _transaction_and_half, transactions.c.transaction_id, _transaction_and_half_pg
)

transaction_by_id = select(transactions).where(
    transactions.c.transaction_id == bindparam("transaction_id")
)

resolve_transaction = Prepared(
    update(transactions)
    .where(
        transactions.c.transaction_id == bindparam("b_transaction_id"),
        OPEN_STATE,
    )
    .values(
        state=bindparam("b_state"),
        resolved_at=bindparam("b_at"),
        resolved_by=bindparam("b_by"),
        resolved_client=bindparam("b_client"),
        **OUT_OF_CHECKS,
    )
)

_waiting = messages.c.released_at.is_(None), messages.c.deliver_at.is_not(None)

due_delayed = (
    select(messages)
    .where(messages.c.topic == bindparam("topic"), *_waiting)
    .where(messages.c.deliver_at <= bindparam("now"))
    .order_by(messages.c.deliver_at)
    .limit(bindparam("limit"))
)
due_delayed_locked = due_delayed.with_for_update(skip_locked=True)

mark_released = (
    update(messages).where(messages.c.id == bindparam("b_id")).values(released_at=bindparam("b_at"))
)

next_delayed = select(func.min(messages.c.deliver_at)).where(
    messages.c.topic == bindparam("topic"), *_waiting
)
