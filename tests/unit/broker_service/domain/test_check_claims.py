"""A push check's outcome applied after its claim expired (the event loop or the store stalled
past ``interval + 2 * push_timeout``), on both stores, with two brokers' domains on one store and
one clock the test moves: the late outcome is neither counted nor scheduled, and never takes over
the claim another broker holds since; it is traced as dropped.  The decision an answer carries is
still applied once (``resolve`` refuses a second one), which these tests do not need to show."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker_service.domain.config import CheckPolicy, DomainConfig
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.messages.sending import Sender
from broker_service.domain.messages.service import MessageService
from broker_service.domain.ports import Store
from broker_service.domain.transactions.checkback import CheckBack, PushCheck
from broker_service.domain.transactions.model import (
    CheckFailure,
    CheckOutcome,
    TransactionRecord,
)
from broker_service.domain.transactions.pulls import PullHub
from broker_service.domain.transactions.service import TransactionService
from broker_service.metrics import BrokerMetrics
from broker_service.schedulers.checkback import CheckBackScheduler
from framework.checkserver import start_thread_server
from framework.message import LocalTransactionState, Message
from tests.unit.broker_service.domain.conftest import Clock

TIMEOUT_MS = 6000  # DomainConfig's transaction_timeout_ms
POLICY = CheckPolicy()
CLAIM_MS = POLICY.interval_ms + 2 * POLICY.push_timeout_ms  # how long a push check is claimed


class Brokers:
    """Two brokers' domains on one store, on one clock."""

    def __init__(self, store: Store) -> None:
        self.clock = Clock()
        sender = Sender(DomainConfig(), clock=self.clock)
        self.messages = MessageService(store, sender)
        self.a, self.b = (
            TransactionService(
                store, sender, CheckBack(CheckPolicy(broker_id=name, trace=True), self.clock)
            )
            for name in ("broker-a", "broker-b")
        )
        self.store = store

    async def record(self, txid: str) -> TransactionRecord:
        record = await self.store.read(lambda tx: tx.get_transaction(txid))
        assert record is not None
        return record

    async def claim(self) -> tuple[str | None, int | None]:
        return await self.store.read(lambda tx: tx.check_claim(self.txid))

    async def half_checked_by_a(self) -> PushCheck:
        """A half, two push instances of its group, and broker A's round: its push check."""
        await self.messages.create_topic("transfers", 1, False)
        receipt = await self.a.prepare("transfers", MessageDraft(b"t"), "bob", None)
        self.txid, self.msg_id = receipt.transaction_id, receipt.msg_id
        for client in ("bob-1", "bob-2"):
            url = f"http://127.0.0.1:9/{client}"
            await self.a.heartbeat("bob", client, url, ["transfers"], source="127.0.0.1")
        self.clock.advance(TIMEOUT_MS)
        (check,) = (await self.a.claim_round(10)).pushes
        assert (await self.claim())[0] == "broker-a"
        return check


@pytest.fixture
def brokers(any_store: Store) -> Brokers:
    return Brokers(any_store)


UNKNOWN = CheckOutcome("push", answer="UNKNOWN", latency_ms=5)


async def test_an_answer_within_the_claim_is_counted_and_scheduled(brokers: Brokers) -> None:
    check = await brokers.half_checked_by_a()
    brokers.clock.advance(CLAIM_MS - 1)
    await brokers.a.check_received(check, UNKNOWN)
    record = await brokers.record(brokers.txid)
    assert record.check_times == 1
    assert record.next_check_at == brokers.clock.now + POLICY.interval_ms
    assert await brokers.claim() == (None, None)


async def test_an_answer_after_the_claim_expired_is_neither_counted_nor_scheduled(
    brokers: Brokers,
) -> None:
    check = await brokers.half_checked_by_a()
    due_at = (await brokers.record(brokers.txid)).next_check_at
    brokers.clock.advance(CLAIM_MS + 1)  # broker A stalled past its claim; no one checked since

    await brokers.a.check_received(check, UNKNOWN)

    record = await brokers.record(brokers.txid)
    assert record.check_times == 0, "a check whose claim had expired is not counted"
    assert record.next_check_at == due_at, "the half stays due: the next round checks it"
    (late,) = [c for c in (await brokers.a.checks(brokers.txid)).checks if c.answer]
    assert late.answer == "UNKNOWN"
    assert late.check_times == 0
    assert late.error is not None
    assert "claim" in late.error


async def test_a_late_answer_leaves_the_claim_another_broker_took_since(brokers: Brokers) -> None:
    check_a = await brokers.half_checked_by_a()
    brokers.clock.advance(CLAIM_MS + 1)
    (check_b,) = (await brokers.b.claim_round(10)).pushes  # B claims the half A let expire
    claim_b = await brokers.claim()
    assert claim_b[0] == "broker-b"

    await brokers.a.check_received(check_a, UNKNOWN)  # A's answer comes in after all
    timed_out = CheckOutcome("push", failure=CheckFailure.TIMEOUT, error="no answer within 5 s")
    await brokers.a.check_received(check_a, timed_out)

    record = await brokers.record(brokers.txid)
    assert record.check_times == 0, "neither of A's late outcomes counted"
    assert await brokers.claim() == claim_b, "B's claim is untouched"
    assert record.next_check_at == claim_b[1]

    await brokers.b.check_received(check_b, UNKNOWN)  # B's own answer, in time, counts
    record = await brokers.record(brokers.txid)
    assert record.check_times == 1
    assert record.next_check_at == brokers.clock.now + POLICY.interval_ms


async def test_a_late_undelivered_check_does_not_take_the_claim_back(brokers: Brokers) -> None:
    check_a = await brokers.half_checked_by_a()
    brokers.clock.advance(CLAIM_MS + 1)
    (check_b,) = (await brokers.b.claim_round(10)).pushes
    claim_b = await brokers.claim()

    refused = CheckOutcome("push", failure=CheckFailure.REFUSED, error="ConnectError")
    report = await brokers.a.check_undelivered(check_a, refused)

    assert report.pushes == [], "A does not hand B's check to another instance"
    assert report.skipped_unreachable == []
    assert await brokers.claim() == claim_b
    record = await brokers.record(brokers.txid)
    assert record.check_client_id == check_b.instance.client_id
    assert record.undelivered_since is None


async def test_an_answer_after_an_operators_check_now_leaves_the_forced_check(
    brokers: Brokers,
) -> None:
    check = await brokers.half_checked_by_a()
    await brokers.a.check_now(brokers.txid, "ops")  # releases the claim: checked again now
    forced_at = brokers.clock.now
    brokers.clock.advance(100)

    await brokers.a.check_received(check, UNKNOWN)

    record = await brokers.record(brokers.txid)
    assert record.check_times == 0
    assert record.next_check_at == forced_at, "the operator's check is still due"
    (late,) = [c for c in (await brokers.a.checks(brokers.txid)).checks if c.answer]
    assert late.error is not None
    assert "released" in late.error


async def test_the_scheduler_logs_an_answer_that_came_after_its_claim(
    brokers: Brokers, caplog: pytest.LogCaptureFixture
) -> None:
    """End to end over real HTTP: broker A's scheduler pushes the check to the framework's check
    server, whose answer comes once A's claim has ended (the clock moves past it while the check
    is in flight, as in a stall); A logs it as late and counts nothing."""
    caplog.set_level(logging.INFO, logger="halfmq.checkback")
    await brokers.messages.create_topic("transfers", 1, False)
    receipt = await brokers.a.prepare("transfers", MessageDraft(b"t"), "bob", None)

    def answer(message: Message) -> LocalTransactionState:
        brokers.clock.advance(CLAIM_MS + 1)
        return LocalTransactionState.UNKNOW

    server, url = start_thread_server(answer, "127.0.0.1", 0)
    scheduler = CheckBackScheduler(
        brokers.a,
        BrokerMetrics(),
        PullHub(),
        interval_seconds=3600,
        push_timeout_seconds=10,
        round_max=10,
    )
    try:
        await brokers.a.heartbeat("bob", "bob-1", url, ["transfers"], source="127.0.0.1")
        brokers.clock.advance(TIMEOUT_MS)
        scheduler.start()
        for _ in range(400):  # bounded: one round, one push
            if any("claim ended" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.05)
    finally:
        await scheduler.stop()
        server.shutdown()
        server.server_close()

    (late,) = [r for r in caplog.records if "claim ended" in r.getMessage()]
    assert late.levelno == logging.WARNING
    assert late.getMessage().startswith(f"answer UNKNOWN of the check of {receipt.transaction_id}")
    assert "not counted" in late.getMessage()
    assert (await brokers.record(receipt.transaction_id)).check_times == 0
