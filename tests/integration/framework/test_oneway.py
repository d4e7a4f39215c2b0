"""One-way sends (issue 31): ``send_oneway`` returns at once and never raises -- not for a broker
that refuses the message, not for a broker that is stopped -- and counts what became of each
send; inside a local transaction it is refused with a clear error.

The stopped broker is a real broker process, stopped by PID; the transaction tests run the real
broker in process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    BrokerUnavailableError,
    CheckMode,
    LocalTransactionState,
    Message,
    OneWayInTransactionError,
    PushConsumer,
    Retry,
    TransactionProducer,
)
from framework.oneway import OneWayStats
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import Bank, effects
from tests.support import BrokerProcess, free_port, wait_until

COMMIT = LocalTransactionState.COMMIT_MESSAGE
QUICK = Retry(attempts=2, backoff=0.01)  # a stopped broker fails fast
AT_ONCE = 0.5  # seconds: "returns at once", with room for a loaded machine


@pytest.fixture
def broker_process(migrated_url: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A real broker process on SQLite and on PostgreSQL (the one-way sends it stores are
    consumed back from its store), with a topic ``events``."""
    process = BrokerProcess(migrated_url, free_port(), tmp_path / "broker.log")
    process.start()
    try:
        with TransactionProducer("admin", brokers=[process.url], check=CheckMode.none()) as admin:
            admin.create_topic("events", queues=2)
        yield process
    finally:
        process.stop()


def _counts(producer: TransactionProducer | AsyncTransactionProducer) -> OneWayStats:
    return producer.oneway.read()


def test_oneway_is_stored_refused_and_survives_a_stopped_broker(
    broker_process: BrokerProcess,
) -> None:
    producer = TransactionProducer(
        "oneway-sync", brokers=[broker_process.url], check=CheckMode.none(), retry=QUICK
    )
    consumer = PushConsumer(
        "oneway-reader", brokers=[broker_process.url], wait_seconds=0.5, consume_from="FIRST_OFFSET"
    )
    seen: list[str] = []
    consumer.subscribe("events")(lambda m: seen.append(m.text))
    try:
        began = time.monotonic()
        for n in range(5):
            producer.send_oneway(Message("events", body=f"e-{n}"))
        producer.send_oneway(Message("no-such-topic", body="lost"))  # refused: 404
        assert time.monotonic() - began < AT_ONCE * 6
        wait_until(lambda: _counts(producer).pending == 0, 20, "the one-way sends to end")
        assert _counts(producer) == OneWayStats(sent=6, stored=5, refused=1)
        with consumer:
            wait_until(lambda: len(seen) >= 5, 20, "the five stored one-way messages")
        assert sorted(seen) == [f"e-{n}" for n in range(5)]

        broker_process.stop()
        with pytest.raises(BrokerUnavailableError):  # a plain send raises...
            producer.send(Message("events", body="plain"))
        began = time.monotonic()
        producer.send_oneway(Message("events", body="into the void"))  # ...a one-way one does not
        assert time.monotonic() - began < AT_ONCE
        wait_until(lambda: _counts(producer).failed == 1, 20, "the failed one-way send")
        assert _counts(producer) == OneWayStats(sent=7, stored=5, refused=1, failed=1)
    finally:
        producer.shutdown()


async def test_async_oneway_is_stored_refused_and_survives_a_stopped_broker(
    broker_process: BrokerProcess,
) -> None:
    producer = AsyncTransactionProducer(
        "oneway-async", brokers=[broker_process.url], check=CheckMode.none(), retry=QUICK
    )
    consumer = AsyncPushConsumer(
        "oneway-areader",
        brokers=[broker_process.url],
        wait_seconds=0.5,
        consume_from="FIRST_OFFSET",
    )
    seen: list[str] = []
    consumer.subscribe("events")(lambda m: seen.append(m.text))
    try:
        for n in range(5):
            await producer.send_oneway(Message("events", body=f"e-{n}"))
        await producer.send_oneway(Message("no-such-topic", body="lost"))
        await _eventually(lambda: _counts(producer).pending == 0, "the one-way sends to end")
        assert _counts(producer) == OneWayStats(sent=6, stored=5, refused=1)
        async with consumer:
            await _eventually(lambda: len(seen) >= 5, "the five stored one-way messages")
        assert sorted(seen) == [f"e-{n}" for n in range(5)]

        broker_process.stop()
        with pytest.raises(BrokerUnavailableError):
            await producer.send(Message("events", body="plain"))
        began = time.monotonic()
        await producer.send_oneway(Message("events", body="into the void"))
        assert time.monotonic() - began < AT_ONCE
        await _eventually(lambda: _counts(producer).failed == 1, "the failed one-way send")
        assert _counts(producer) == OneWayStats(sent=7, stored=5, refused=1, failed=1)
    finally:
        await producer.shutdown()


def test_oneway_to_a_broker_that_never_was_returns_at_once_and_shutdown_is_bounded() -> None:
    """Nothing listens on the port: the send returns at once; shutdown gives it one request's
    time-outs at most, never a hang."""
    producer = TransactionProducer(
        "oneway-void", brokers=[f"http://127.0.0.1:{free_port()}"], check=CheckMode.none()
    )
    began = time.monotonic()
    for n in range(20):
        producer.send_oneway(Message("events", body=str(n)))
    assert time.monotonic() - began < AT_ONCE
    producer.shutdown()
    assert time.monotonic() - began < 30
    counts = _counts(producer)
    assert counts.sent == 20
    assert counts.stored == 0
    assert counts.failed + counts.dropped == 20


# -- refused inside a local transaction -------------------------------------------------------------


def test_oneway_inside_a_local_transaction_is_refused(inproc: InProcessBroker) -> None:
    producer = TransactionProducer(
        "bob-oneway", brokers=[inproc.url], transport=inproc.transport, check=CheckMode.none()
    )
    refused: list[OneWayInTransactionError] = []

    @producer.execute_local_transaction("transfers")
    def debit(message: Message, arg: Any) -> LocalTransactionState:
        try:
            producer.send_oneway(Message("transfers", body="side effect"))
        except OneWayInTransactionError as exc:
            refused.append(exc)
        return COMMIT

    with producer:
        result = producer.send_message_in_transaction(Message("transfers", body="t"))
        producer.send_oneway(Message("transfers", body="after"))  # outside: accepted
        wait_until(lambda: _counts(producer).stored == 1, 10, "the one-way send after")
    assert result.resolution == "COMMITTED"
    [error] = refused
    assert error.transaction_id == result.transaction_id
    assert error.topic == "transfers"
    assert "inside the local transaction" in str(error)
    assert "producer.send(" in str(error)
    assert _counts(producer) == OneWayStats(sent=1, stored=1)


async def test_async_oneway_inside_a_local_transaction_is_refused(
    ainproc: InProcessBroker,
) -> None:
    producer = AsyncTransactionProducer(
        "bob-aoneway", brokers=[ainproc.url], transport=ainproc.async_transport,
        check=CheckMode.none(),
    )  # fmt: skip
    refused: list[str] = []

    @producer.execute_local_transaction("transfers")
    async def debit(message: Message, arg: Any) -> LocalTransactionState:
        try:
            await producer.send_oneway(Message("transfers", body="side effect"))
        except OneWayInTransactionError as exc:
            refused.append(exc.transaction_id or "")
        return COMMIT

    @producer.execute_local_transaction("audit")
    def plain_debit(message: Message, arg: Any) -> LocalTransactionState:
        """A plain function runs in a worker thread: the mark goes with it."""
        try:
            asyncio.run(producer.send_oneway(Message("transfers", body="side effect")))
        except OneWayInTransactionError as exc:
            refused.append(exc.transaction_id or "")
        return COMMIT

    await ainproc.acreate_topic("audit")
    async with producer:
        first = await producer.send_message_in_transaction(Message("transfers", body="t"))
        second = await producer.send_message_in_transaction(Message("audit", body="t"))
        await producer.send_oneway(Message("transfers", body="after"))
        await _eventually(lambda: _counts(producer).stored == 1, "the one-way send after")
    assert refused == [first.transaction_id, second.transaction_id]
    assert first.resolution == second.resolution == "COMMITTED"


def test_oneway_inside_an_automatic_local_transaction_is_refused(
    bank: Bank, inproc: InProcessBroker
) -> None:
    """``@producer.transactional`` (the local-transaction log, SQLite and PostgreSQL): refused,
    and the handler's own write still commits."""
    producer = TransactionProducer(
        "bob-auto-oneway", brokers=[inproc.url], transport=inproc.transport, check=CheckMode.none()
    )
    refused: list[OneWayInTransactionError] = []

    @producer.transactional("transfers", session_factory=bank.Session)
    def debit(session: Any, message: Message, arg: Any) -> None:
        session.execute(effects.insert().values(key=message.msg_id, amount=1))
        try:
            producer.send_oneway(Message("transfers", body="side effect"))
        except OneWayInTransactionError as exc:
            refused.append(exc)

    with producer:
        result = producer.send_message_in_transaction(Message("transfers", body="t"))
    assert result.resolution == "COMMITTED"
    assert [e.transaction_id for e in refused] == [result.transaction_id]
    assert bank.effects() == [result.msg_id]
    assert _counts(producer).sent == 0


async def _eventually(predicate: Any, what: str, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)
