"""The in-memory store and the SQL store (SQLite) given the same domain work, on the same clock
and the same ids, hold the same: every message (ids, offsets, properties, release times), queue,
transaction, progress row, delivery, trace event and statistic -- and a purge round, dry and then
for real, counts and deletes the same rows on both."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker_service.domain import ids
from broker_service.domain.config import CheckPolicy, ConsumerConfig, DomainConfig, RetentionPolicy
from broker_service.domain.consumers.model import (
    ConsumeFrom,
    ConsumerGroup,
    MessageModel,
    Receiving,
)
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.consumers.wakeup import Arrivals
from broker_service.domain.errors import Conflict
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.messages.sending import Sender
from broker_service.domain.messages.service import MessageService
from broker_service.domain.ports import MessageQuery, Store, StoreTx, TransactionQuery
from broker_service.domain.retention.model import PurgeReport
from broker_service.domain.retention.service import RetentionService
from broker_service.domain.transactions.checkback import CheckBack
from broker_service.domain.transactions.halves import Resolving
from broker_service.domain.transactions.model import (
    CheckFailure,
    CheckOutcome,
    Decision,
    ResolvedBy,
)
from broker_service.domain.transactions.service import TransactionService
from broker_service.memstore import MemoryStore
from tests.support import open_store

HOUR = 3_600_000
RETENTION_MS = 2 * HOUR


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def _snapshot(tx: StoreTx) -> dict[str, Any]:
    """Everything the store holds, as the ports read it."""
    heads = tx.queue_heads()
    topics = sorted({h.topic for h in heads})
    messages = {t: tx.query_messages(MessageQuery(topic=t, limit=10_000)) for t in topics}
    msg_ids = sorted({m.msg_id for found in messages.values() for m in found})
    groups = ["shop", "fan"]
    stats = tx.store_stats("reconcile-export")
    return {
        "topics": tx.list_topics(),
        "queues": {t: tx.queue_infos(t) for t in topics},
        "heads": heads,
        "messages": messages,
        "transactions": tx.list_transactions(TransactionQuery(limit=1_000)),
        "progress": {g: tx.list_progress(g) for g in groups},
        "all_progress": tx.all_groups_progress(),
        "dead": tx.dead_letter_counts(),
        "readers": {t: tx.readers_of(t) for t in topics},
        "deliveries": {m: tx.deliveries_of(m) for m in msg_ids},
        "trace": {m: tx.trace_events_of(m) for m in msg_ids},
        "open": {g: tx.open_delivery_counts(g, 1_700_000_000_000 + 100 * HOUR) for g in groups},
        "producers": tx.list_producers("bank"),
        "rows": stats.rows,
        "oldest": stats.oldest_message_at,
        "expired": stats.expired,
        "purged": {m: tx.purged_at("m", [m]) for m in msg_ids},
    }


def _report(report: PurgeReport) -> tuple[object, ...]:
    return (report.purged, report.expired, report.held, report.complete, report.export_held)


async def _work(store: Store) -> list[object]:
    """A day of a small broker's work, then two purge rounds; what each step answered and what
    the store held after each phase."""
    clock = Clock()
    sender = Sender(DomainConfig(), clock=clock)
    messages = MessageService(store, sender)
    policy = CheckPolicy(broker_id="b", trace=True)
    transactions = TransactionService(store, sender, CheckBack(policy, clock))
    consumers = ConsumerService(
        store, ConsumerConfig(max_reconsume_times=1, trace=True), Arrivals(), clock=clock
    )
    answers: list[object] = []

    await messages.create_topic("orders", 2, False)
    await consumers.create_group(ConsumerGroup("shop", consume_from=ConsumeFrom.FIRST_OFFSET))
    await consumers.subscribe("shop", "orders", "*")
    await consumers.create_group(
        ConsumerGroup("fan", MessageModel.BROADCASTING, ConsumeFrom.FIRST_OFFSET)
    )
    await consumers.subscribe("fan", "orders", "A || B")
    for i in range(8):
        clock.now += 1_000
        draft = MessageDraft(f"m{i}".encode(), tags="AB"[i % 2], keys=(f"k{i % 3}",))
        answers.append(await messages.send("orders", [draft]))
    answers.append(await messages.send("orders", [MessageDraft(b"x", msg_id="dup")]))
    answers.append(await messages.send("orders", [MessageDraft(b"x", msg_id="dup")]))
    with pytest.raises(Conflict):
        await messages.send("orders", [MessageDraft(b"other", msg_id="dup")])
    answers.append(await messages.send("orders", [MessageDraft(b"later", delay_level=2)]))

    await transactions.heartbeat("bank", "bank-1", None, ["orders"])
    halves = [
        (await transactions.prepare("orders", MessageDraft(f"t{i}".encode()), "bank", None))
        for i in range(3)
    ]
    answers.append(halves)
    resolved = [Decision.COMMIT, Decision.ROLLBACK]
    for half, decision in zip(halves, resolved, strict=False):
        answers.append(
            await transactions.resolve(
                Resolving(half.transaction_id, decision, "bank", ResolvedBy.PRODUCER)
            )
        )
    clock.now += 10_000
    answers.append(await transactions.claim_round(10))

    got = await consumers.receive(Receiving("shop", "c1", None, 5, 30, 0))
    answers.append(got)
    answers.append(await consumers.ack("shop", [d.receipt_handle for d in got[:2]]))
    answers.append(await consumers.nack("shop", got[2].receipt_handle, None))
    answers.append(await consumers.receive(Receiving("fan", "f1", None, 20, 30, 0)))
    clock.now += 60_000  # leases run out, the delayed messages come due
    answers.append(await messages.release_due(100))
    answers.append(await consumers.receive(Receiving("shop", "c2", None, 20, 30, 0)))
    answers.append(await consumers.view("shop"))
    answers.append(await consumers.backlog())
    answers.append(await store.read(_snapshot))

    clock.now += 3 * HOUR
    retention = RetentionService(
        store, RetentionPolicy(RETENTION_MS, RETENTION_MS, HOUR, False, batch=3), clock
    )
    answers.append(_report(await retention.purge(dry_run=True)))
    answers.append(_report(await retention.purge()))
    answers.append(await store.read(_snapshot))
    return answers


async def _more_work(store: Store) -> list[object]:
    """An orderly group's retries in place, dead letters and their resend, leases renewed,
    offsets reset, push and pull checks (answered, failed, discarded, forced), a topic deleted and
    created again."""
    clock = Clock()
    sender = Sender(DomainConfig(), clock=clock)
    messages = MessageService(store, sender)
    policy = CheckPolicy(check_max=2, broker_id="b", trace=True)
    transactions = TransactionService(store, sender, CheckBack(policy, clock))
    consumers = ConsumerService(
        store, ConsumerConfig(max_reconsume_times=1, trace=True), Arrivals(), clock=clock
    )
    answers: list[object] = []

    await messages.create_topic("orders", 2, True)
    await consumers.create_group(ConsumerGroup("shop", orderly=True))
    await consumers.subscribe("shop", "orders", "*")
    for i in range(6):
        clock.now += 1_000
        await messages.send("orders", [MessageDraft(f"o{i}".encode(), sharding_key=f"s{i % 2}")])
    got = await consumers.receive(Receiving("shop", "c1", None, 10, 30, 0, max_per_queue=2))
    answers.append(got)
    answers.append(await consumers.nack("shop", got[0].receipt_handle, None))
    answers.append(await consumers.change_invisible("shop", got[1].receipt_handle, 90))
    answers.append(await consumers.ack("shop", [d.receipt_handle for d in got[2:]]))
    for _ in range(3):
        clock.now += 40_000
        again = await consumers.receive(Receiving("shop", "c1", None, 10, 30, 0, max_per_queue=2))
        answers.append(again)
        for d in again[:1]:
            answers.append(await consumers.nack("shop", d.receipt_handle, None))
    answers.append(await consumers.dead_messages("shop", 10))
    dead = await consumers.dead_messages("shop", 10)
    if dead:
        answers.append(await consumers.resend("shop", dead[0].message.msg_id))
    answers.append(await consumers.reset_offset("shop", "orders", clock.now - 3_000))
    answers.append(await consumers.view("shop"))

    push = "http://127.0.0.1:9/check"
    await transactions.heartbeat("bank", "push-1", push, ["orders"], source="127.0.0.1")
    halves = [
        await transactions.prepare("orders", MessageDraft(f"t{i}".encode()), "bank", None)
        for i in range(3)
    ]
    for _ in range(4):
        clock.now += 40_000
        report = await transactions.claim_round(10)
        answers.append(report)
        for check in report.pushes:
            failed = CheckOutcome("push", failure=CheckFailure.REFUSED, error="refused")
            if check.request.transaction_id == halves[0].transaction_id:
                answered = CheckOutcome("push", answer="UNKNOWN", latency_ms=3)
                answers.append(await transactions.check_received(check, answered))
            else:
                answers.append(await transactions.check_undelivered(check, failed))
    await transactions.heartbeat("bank", "pull-1", None, ["orders"])
    answers.append(await transactions.check_now(halves[2].transaction_id, "ops"))
    clock.now += 40_000
    answers.append(await transactions.claim_round(10))
    answers.append(await transactions.pull_checks("bank", "pull-1", 10))
    answers.append(await transactions.undelivered_halves(0))
    answers.append(await transactions.pending_by_age([0, 60_000, 10 * 60_000]))
    for half in halves:
        answers.append(await transactions.checks(half.transaction_id))

    await messages.delete_topic("orders")
    await messages.create_topic("orders", 3, False)
    answers.append(await messages.send("orders", [MessageDraft(b"again")]))
    answers.append(await messages.list_topics())
    answers.append(await store.read(_snapshot))
    return answers


@pytest.mark.parametrize("work", [_work, _more_work], ids=["day", "more"])
async def test_the_memory_store_holds_what_sqlite_holds(
    work: Callable[[Store], Awaitable[list[object]]],
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def same_ids() -> None:
        monkeypatch.setattr(ids, "_prefix", "0" * 24)
        monkeypatch.setattr(ids, "_counter", itertools.count())

    same_ids()
    async with open_store(sqlite_url) as sql:
        on_sqlite = await work(sql)
    same_ids()
    on_memory = await work(MemoryStore())
    assert len(on_memory) == len(on_sqlite)
    for step, (memory, sqlite) in enumerate(zip(on_memory, on_sqlite, strict=True)):
        assert memory == sqlite, f"step {step}"
