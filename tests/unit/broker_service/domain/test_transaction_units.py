"""The half-message protocol as the domain runs it, without HTTP: a transaction is resolved once,
a repeat answers the same, the opposite decision is a conflict, and nothing moves on a refusal."""

from __future__ import annotations

import asyncio

import pytest

from broker_service.domain import names
from broker_service.domain.errors import Conflict, Forbidden, NotFound
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.ports import MessageQuery
from broker_service.domain.transactions.halves import Resolving
from broker_service.domain.transactions.model import (
    Decision,
    ResolvedBy,
    TransactionRecord,
    TransactionState,
)
from tests.unit.broker_service.domain.conftest import Domain

PRODUCER = ResolvedBy.PRODUCER


async def _half(domain: Domain, delay_level: int | None = None) -> str:
    await domain.messages.create_topic("transfers", 2, False)
    draft = MessageDraft(b"transfer", delay_level=delay_level)
    receipt = await domain.transactions.prepare("transfers", draft, "bob", None)
    assert receipt.state is TransactionState.PREPARED
    return receipt.transaction_id


async def _in_topic(domain: Domain, topic: str) -> list[bytes]:
    found = await domain.messages.query_messages(MessageQuery(topic=topic, limit=100))
    return [m.body for m in found]


async def test_a_commit_puts_the_message_in_its_topic_once_and_a_repeat_answers_the_same(
    domain: Domain,
) -> None:
    txid = await _half(domain)
    assert await _in_topic(domain, "transfers") == []  # a half is invisible
    first = await domain.transactions.resolve(Resolving(txid, Decision.COMMIT, "bob", PRODUCER))
    again = await domain.transactions.resolve(Resolving(txid, Decision.COMMIT, "bob", PRODUCER))
    assert first.state is TransactionState.COMMITTED
    assert (again.state, again.queue_id, again.queue_offset) == (
        first.state,
        first.queue_id,
        first.queue_offset,
    )
    assert await _in_topic(domain, "transfers") == [b"transfer"]
    assert await _in_topic(domain, names.OP_HALF_TOPIC) != []
    record = await domain.transactions.get_transaction(txid)
    assert (record.state, record.resolved_by) == (TransactionState.COMMITTED, PRODUCER)


async def test_the_opposite_decision_after_a_rollback_is_a_conflict(domain: Domain) -> None:
    txid = await _half(domain)
    rolled = await domain.transactions.resolve(Resolving(txid, Decision.ROLLBACK, "bob", PRODUCER))
    assert rolled.state is TransactionState.ROLLED_BACK
    with pytest.raises(Conflict) as refused:
        await domain.transactions.resolve(Resolving(txid, Decision.COMMIT, "bob", PRODUCER))
    assert refused.value.code == "TRANSACTION_ALREADY_RESOLVED"
    assert await _in_topic(domain, "transfers") == []


async def test_a_commit_and_a_rollback_at_once_resolve_the_transaction_once(
    domain: Domain,
) -> None:
    txid = await _half(domain)
    answers = await asyncio.gather(
        domain.transactions.resolve(Resolving(txid, Decision.COMMIT, "bob", PRODUCER)),
        domain.transactions.resolve(Resolving(txid, Decision.ROLLBACK, "bob", PRODUCER)),
        return_exceptions=True,
    )
    won = [a for a in answers if not isinstance(a, BaseException)]
    lost = [a for a in answers if isinstance(a, BaseException)]
    assert len(won) == 1
    assert len(lost) == 1
    assert isinstance(lost[0], Conflict)
    record = await domain.transactions.get_transaction(txid)
    assert record.state is won[0].state
    ops = await _in_topic(domain, names.OP_HALF_TOPIC)
    assert len(ops) == 1, "one op record: one decision"


async def test_refusals_change_nothing(domain: Domain) -> None:
    txid = await _half(domain)
    with pytest.raises(NotFound) as unknown:
        await domain.transactions.resolve(Resolving("no-such-tx", Decision.COMMIT, "bob", PRODUCER))
    assert unknown.value.code == "TRANSACTION_NOT_FOUND"
    with pytest.raises(Conflict) as mismatch:
        await domain.transactions.resolve(Resolving(txid, Decision.COMMIT, "alice", PRODUCER))
    assert mismatch.value.code == "PRODUCER_GROUP_MISMATCH"

    def refuse(record: TransactionRecord) -> None:
        raise Forbidden(f"not on {record.topic}", code="PERMISSION_DENIED")

    with pytest.raises(Forbidden):
        await domain.transactions.resolve(Resolving(txid, Decision.COMMIT, "bob", PRODUCER, refuse))
    record = await domain.transactions.get_transaction(txid)
    assert record.state is TransactionState.PREPARED
    assert await _in_topic(domain, names.OP_HALF_TOPIC) == []


async def test_a_delay_counts_from_the_commit(domain: Domain) -> None:
    txid = await _half(domain, delay_level=2)  # 5 s
    domain.clock.advance(60_000)
    committed = await domain.transactions.resolve(Resolving(txid, Decision.COMMIT, "bob", PRODUCER))
    assert committed.queue_offset is None, "parked until its time"
    parked = await domain.messages.query_messages(MessageQuery(topic=names.SCHEDULE_TOPIC))
    assert [m.deliver_at for m in parked] == [domain.clock.now + 5_000]
    domain.clock.advance(5_000)
    report = await domain.messages.release_due(100)
    assert report.released == 1
    assert await _in_topic(domain, "transfers") == [b"transfer"]
