"""Reading a broker's store directly, to assert what is really there (not what the broker says)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import create_engine, select

from broker_service.store.schema import messages, queues, transactions


def rows(url: str, table: Any, *where: Any) -> list[Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(table).where(*where)))
    finally:
        engine.dispose()


def assert_offsets_dense(url: str) -> None:
    """Every queue's offsets are 0..n-1, unique, and its next_offset is n."""
    by_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    for row in rows(url, messages):
        by_queue[(row.topic, row.queue_id)].append(row.queue_offset)
    next_offsets = {(r.topic, r.queue_id): r.next_offset for r in rows(url, queues)}
    for key, offsets in by_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), f"gap or duplicate in {key}"
        assert next_offsets[key] == len(offsets), f"next_offset of {key} is off"


def assert_transactions_consistent(url: str) -> None:
    """Each committed transaction has exactly one op and one real message; rolled back: one op and
    none; prepared: neither."""
    ops: dict[str, int] = defaultdict(int)
    real: dict[str, int] = defaultdict(int)
    for row in rows(url, messages, messages.c.transaction_id.is_not(None)):
        if row.topic == "RMQ_SYS_TRANS_OP_HALF_TOPIC":
            ops[row.transaction_id] += 1
        elif not row.topic.startswith("RMQ_SYS_"):  # halves and parked copies are not real
            real[row.transaction_id] += 1
    for record in rows(url, transactions):
        txid = record.transaction_id
        expected = {
            "COMMITTED": (1, 1),
            "ROLLED_BACK": (1, 0),
            "PREPARED": (0, 0),
            "DISCARDED": (0, 0),
        }[record.state]
        assert (ops[txid], real[txid]) == expected, f"{txid} {record.state}: ops/real"
