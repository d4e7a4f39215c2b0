"""The writer's read-ahead of earlier sends: the halves (and sends with client-made ids) of one
group commit are looked for by their ``msg_id`` in one statement, not one SELECT each.  It must
answer exactly as the lookups it replaces: a half sent twice is one half, in one group commit and
across group commits, and the same id with other content is still refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from broker_service.domain.config import DomainConfig
from broker_service.domain.errors import Conflict
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.messages.sending import Sender
from broker_service.domain.ports import Half
from broker_service.domain.transactions.halves import HalfReceipt, Transactions
from broker_service.settings import Flush
from broker_service.store.engine import make_engine
from broker_service.store.sqltx import SqlTx
from broker_service.store.writer import GroupCommitWriter

CONFIG = DomainConfig(auto_create_topics=True)


def _half(transactions: Transactions, msg_id: str, body: bytes = b"b") -> Callable[[Any], Any]:
    return transactions.prepare("t", MessageDraft(body, msg_id=msg_id), "g")


@pytest.fixture
def writer_engine(migrated_url: str) -> Iterator[Engine]:
    engine = make_engine(migrated_url, flush=Flush.SYNC, writer=True)
    yield engine
    engine.dispose()


def _lookups(engine: Engine) -> list[str]:
    """SQLite: every statement the writer's connection runs that looks for dedup keys."""
    seen: list[str] = []

    @event.listens_for(engine, "connect")
    def _trace(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.set_trace_callback(
            lambda sql: seen.append(sql) if "dedup_key IN" in sql else None
        )

    return seen


async def _group_commit(writer: GroupCommitWriter, units: list[Callable[[Any], Any]]) -> list[Any]:
    """``units`` queued before the writer runs, so that it takes them in one group commit."""
    futures = [writer.submit(unit) for unit in units]
    batches = writer.batches
    writer.start()
    try:
        answers = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        writer.stop()
    assert writer.batches == batches + 1, "one group commit"
    return list(answers)


def _halves_stored(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT msg_id, count(*) FROM transactions GROUP BY msg_id")
        ).all()
    return {str(msg_id): int(n) for msg_id, n in found}


async def test_a_half_sent_twice_in_one_group_commit_and_again_in_the_next_is_one_half(
    writer_engine: Engine,
) -> None:
    sqlite = writer_engine.dialect.name == "sqlite"
    lookups = _lookups(writer_engine) if sqlite else []
    transactions = Transactions(Sender(CONFIG))
    units = [_half(transactions, m) for m in ["a", "b", "a", "c", "b", "a"]]
    units.append(_half(transactions, "a", b"other"))  # the same id, other content
    assert all(isinstance(u, Half) for u in units)

    first = await _group_commit(GroupCommitWriter(writer_engine), units)

    receipts: list[HalfReceipt] = first[:6]
    assert [r.duplicate for r in receipts] == [False, False, True, False, True, True]
    a, b, _, c, _, _ = receipts
    assert receipts[2].transaction_id == receipts[5].transaction_id == a.transaction_id
    assert receipts[4].transaction_id == b.transaction_id
    assert isinstance(first[6], Conflict)
    assert _halves_stored(writer_engine) == {"a": 1, "b": 1, "c": 1}
    if sqlite:
        assert len(lookups) == 1, "one lookup for the whole group commit"

    # The next group commit finds them in the store, through its own read-ahead.
    again = [_half(transactions, m) for m in ["a", "d", "b", "d"]]
    again.append(_half(transactions, "c", b"other"))
    second = await _group_commit(GroupCommitWriter(writer_engine), again)
    assert [r.duplicate for r in second[:4]] == [True, False, True, True]
    assert second[0].transaction_id == a.transaction_id
    assert second[2].transaction_id == b.transaction_id
    assert second[3].transaction_id == second[1].transaction_id
    assert isinstance(second[4], Conflict)
    assert _halves_stored(writer_engine) == {"a": 1, "b": 1, "c": 1, "d": 1}
    if sqlite:
        assert len(lookups) == 2
    assert c.transaction_id not in {r.transaction_id for r in second[:4]}


async def test_a_send_with_client_ids_after_a_half_of_the_same_id_is_refused(
    writer_engine: Engine,
) -> None:
    sender = Sender(CONFIG)
    transactions = Transactions(sender)
    send = sender.send("t", [MessageDraft(b"m", msg_id="x"), MessageDraft(b"n", msg_id="y")])
    assert send.dedup_keys == ("x", "y")
    answers = await _group_commit(
        GroupCommitWriter(writer_engine),
        [_half(transactions, "x"), send, _half(transactions, "y")],
    )
    assert isinstance(answers[0], HalfReceipt)
    assert isinstance(answers[1], Conflict), "x is a half's id: not a normal message"
    assert isinstance(answers[2], HalfReceipt)
    assert not answers[2].duplicate, "the refused send stored nothing"


async def test_read_ahead_stays_exact_through_a_flush_and_a_purge(writer_engine: Engine) -> None:
    """What the batch itself stores after the read-ahead is found (a flush in the middle of the
    batch empties the buffer the lookups see first), and a purge forgets what was read."""
    transactions = Transactions(Sender(CONFIG))
    with writer_engine.begin() as conn:
        tx = SqlTx(conn)
        tx.read_ahead_sent(["p", "q"])
        assert tx._sent_ahead == {"p": None, "q": None}
        first = _half(transactions, "p")(tx)
        tx.flush()  # as when a later unit of the batch looks at a transaction of this one
        assert tx.find_sent(["p"])["p"].transaction_id == first.transaction_id
        repeat = _half(transactions, "p")(tx)
        assert repeat.duplicate
        assert repeat.transaction_id == first.transaction_id
        assert tx.find_sent(["q"]) == {}
        tx.purge_transactions(0, 10, 0)
        assert tx._sent_ahead == {}, "a purge of messages forgets the read-ahead"
        assert tx.find_sent(["p"])["p"].transaction_id == first.transaction_id
    assert _halves_stored(writer_engine) == {"p": 1}
