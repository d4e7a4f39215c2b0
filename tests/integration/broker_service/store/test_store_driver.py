"""The store's driver-level paths (bulk inserts, precompiled statements) fail the way SQLAlchemy's
own execution does, so that the writer's retries and 422s keep working on both stores."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import bindparam, select, text
from sqlalchemy.exc import IntegrityError

from broker_service.domain.messages.model import PendingMessage, PlainBatch, Topic
from broker_service.settings import Flush
from broker_service.store import statements as sql
from broker_service.store.bulk import chunk_sizes
from broker_service.store.engine import make_engine
from broker_service.store.fastpath import Prepared
from broker_service.store.rows import MESSAGE_COLUMNS
from broker_service.store.schema import messages
from broker_service.store.sqltx import SqlTx


def _row(offset: int, msg_id: str) -> tuple[object, ...]:
    values: dict[str, object] = {column: None for column in MESSAGE_COLUMNS}
    values.update(
        topic="t",
        queue_id=0,
        queue_offset=offset,
        msg_id=msg_id,
        body=b"\x00binary\xff",
        encoding="base64",
        born_at=1,
        stored_at=2,
        reconsume_times=0,
    )
    return tuple(values[c] for c in MESSAGE_COLUMNS)


def test_bulk_insert_round_trips_rows_and_a_duplicate_offset_is_an_integrity_error(
    migrated_url: str,
) -> None:
    engine = make_engine(migrated_url, flush=Flush.SYNC, writer=True)
    by_id = Prepared(select(messages).where(messages.c.msg_id == bindparam("m")))
    try:
        with engine.begin() as conn:
            sql.insert_messages.execute(conn, [_row(0, "a"), _row(1, "b")])
            row = by_id.first(conn, {"m": "b"})
            assert row is not None
            assert bytes(row["body"]) == b"\x00binary\xff"
            assert row["queue_offset"] == 1
        with pytest.raises(IntegrityError), engine.begin() as conn:
            sql.insert_messages.execute(conn, [_row(2, "c"), _row(1, "again")])
        with engine.begin() as conn:  # the failed transaction left nothing, the pool works on
            assert by_id.first(conn, {"m": "c"}) is None
            assert by_id.first(conn, {"m": "a"}) is not None
    finally:
        engine.dispose()


def test_chunk_sizes_cover_every_count_with_few_statements_and_texts() -> None:
    texts: set[int] = set()
    for count in range(1, 3001):
        sizes = list(chunk_sizes(count, 1024))
        assert sum(sizes) == count
        assert all(0 < size <= 1024 for size in sizes)
        assert len(sizes) <= count // 1024 + 2, "the full statements, then two at most"
        texts.update(sizes)
    assert len(texts) == 32 + 31, "multiples of 32 up to 1024, and the rests 1-31"
    assert list(chunk_sizes(400, 1024)) == [384, 16]
    assert list(chunk_sizes(800, 1024)) == [800]
    assert list(chunk_sizes(2500, 1024)) == [1024, 1024, 448, 4]
    assert list(chunk_sizes(50, 16)) == [16, 16, 16, 2], "a table whose statements hold fewer"


def test_bulk_insert_of_more_rows_than_one_statement_takes_keeps_them_all_in_order(
    migrated_url: str,
) -> None:
    engine = make_engine(migrated_url, flush=Flush.SYNC, writer=True)
    count = 2_500  # 1024 + 1024 + 448 + 4 on SQLite; one COPY on PostgreSQL
    try:
        with engine.begin() as conn:
            sql.insert_messages.execute(conn, [_row(n, f"m{n}") for n in range(count)])
        with engine.connect() as conn:
            stored = conn.execute(
                select(messages.c.queue_offset, messages.c.msg_id).order_by(messages.c.id)
            ).all()
        assert [(offset, msg_id) for offset, msg_id in stored] == [
            (n, f"m{n}") for n in range(count)
        ]
    finally:
        engine.dispose()


def test_offsets_taken_in_several_queues_at_once_stay_dense_per_queue(migrated_url: str) -> None:
    """One flush spanning queues (several batches, each in its own queue, and a queue without its
    row yet) hands out each queue's next offsets, gap-free, in the order the messages came."""
    engine = make_engine(migrated_url, flush=Flush.SYNC, writer=True)

    def message(queue_id: int, n: int) -> PendingMessage:
        return PendingMessage("t", queue_id, f"m-{queue_id}-{n}", b"x", "utf-8", 1, 1)

    try:
        with engine.begin() as conn:
            SqlTx(conn).create_topic(Topic("t", 2, False, 6, False, 0))
        with engine.begin() as conn:
            tx = SqlTx(conn)
            first = [message(0, 0), message(0, 1), message(1, 0), message(0, 2)]
            tx.append_all(first)
            tx.flush()
        assert [m.queue_offset for m in first] == [0, 1, 0, 2]
        with engine.begin() as conn:
            tx = SqlTx(conn)
            second = [message(1, 1), message(5, 0), message(0, 3), message(5, 1)]  # 5: no row yet
            tx.append_all(second)
            tx.flush()
        assert [m.queue_offset for m in second] == [1, 0, 3, 1]
    finally:
        engine.dispose()


def test_plain_batches_take_runs_of_offsets_and_a_dropped_unit_leaves_nothing(
    migrated_url: str,
) -> None:
    """A PlainBatch is one run of offsets among single messages of its queue; a unit dropped
    with ``rollback_to`` (its batch and its deduped message) leaves no row, offset or dedup key."""
    engine = make_engine(migrated_url, flush=Flush.SYNC, writer=True)

    def batch(queue_id: int, *bodies: bytes) -> PlainBatch:
        plain = PlainBatch(list(bodies), ["utf-8"] * len(bodies), "t")
        plain.msg_ids = [f"b-{queue_id}-{body.decode()}" for body in bodies]
        plain.queue_id, plain.born_at, plain.stored_at = queue_id, 1, 2
        return plain

    try:
        with engine.begin() as conn:
            SqlTx(conn).create_topic(Topic("t", 2, False, 6, False, 0))
        with engine.begin() as conn:
            tx = SqlTx(conn)
            kept = batch(0, b"a", b"b", b"c")
            tx.append(PendingMessage("t", 0, "single-0", b"s", "utf-8", 1, 1))
            tx.append_batch(kept)
            mark = tx.mark()
            dropped = PendingMessage("t", 0, "dedup-me", b"d", "utf-8", 1, 1)
            dropped.dedup_key = "dedup-me"
            tx.append(dropped)
            tx.append_batch(batch(0, b"x", b"y"))
            tx.rollback_to(mark)
            assert tx.find_sent(["dedup-me"]) == {}, "the dropped unit's dedup key went with it"
            after = PendingMessage("t", 0, "single-1", b"s", "utf-8", 1, 1)
            other = batch(1, b"q")
            tx.append(after)
            tx.append_batch(other)
            tx.flush()
        assert kept.first_offset == 1
        assert after.queue_offset == 4
        assert other.first_offset == 0
        with engine.connect() as conn:
            rows = conn.execute(
                select(messages.c.queue_id, messages.c.queue_offset, messages.c.msg_id)
                .where(messages.c.topic == "t")
                .order_by(messages.c.id)
            ).all()
        assert [tuple(r) for r in rows] == [
            (0, 0, "single-0"),
            (0, 1, "b-0-a"),
            (0, 2, "b-0-b"),
            (0, 3, "b-0-c"),
            (0, 4, "single-1"),
            (1, 0, "b-1-q"),
        ]
    finally:
        engine.dispose()


def test_a_store_error_never_shows_the_statements_parameters(tmp_path: Path) -> None:
    """An ACL version's text holds secret keys; an error writing it may be logged."""
    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}", flush=Flush.ASYNC, writer=True)
    try:
        insert = text("INSERT INTO t (k) VALUES (:k)")
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (k TEXT PRIMARY KEY)"))
            conn.execute(insert, {"k": "secretKey: s3cr3t"})
        with engine.begin() as conn, pytest.raises(IntegrityError) as failed:
            conn.execute(insert, {"k": "secretKey: s3cr3t"})
        assert "s3cr3t" not in str(failed.value)
        assert "hidden due to hide_parameters" in str(failed.value)
    finally:
        engine.dispose()
