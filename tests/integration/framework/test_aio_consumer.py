"""AsyncPushConsumer against the real broker in process (httpx.ASGITransport) and as a
subprocess over real HTTP: the same behaviours as the sync face."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from framework import AsyncTransactionProducer, ConsumeResult, Message
from framework.acks import AckMode, BatchAck
from framework.aio_consumer import AsyncPushConsumer
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import Bank, effects
from tests.support import BrokerProcess

MakeConsumer = Callable[..., AsyncPushConsumer]
MakeProducer = Callable[..., AsyncTransactionProducer]


async def eventually(predicate: Callable[[], Any], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


async def _send(producers: MakeProducer, count: int, **fields: Any) -> list[Message]:
    producer = producers("sender")
    messages = [Message("transfers", body=str(i), keys=[f"k-{i}"], **fields) for i in range(count)]
    for message in messages:
        await producer.send(message)
    return messages


async def _settled(broker: InProcessBroker, group: str = "smith-bank") -> bool:
    async with broker.async_client() as client:
        view = (await client.get(f"/v1/consumer-groups/{group}")).json()
    return bool(view["lag"] == 0 and view["in_flight"] == 0 and view["retrying"] == 0)


async def test_async_handlers_ack_and_nack(
    aconsumers: MakeConsumer, aproducers: MakeProducer
) -> None:
    seen: list[Message] = []
    consumer = aconsumers()

    @consumer.subscribe("transfers")
    async def credit(message: Message) -> ConsumeResult:
        seen.append(message)
        if message.text == "1" and message.reconsume_times == 0:
            raise RuntimeError("later")
        return ConsumeResult.CONSUME_SUCCESS

    await _send(aproducers, 3)
    async with consumer:
        await eventually(lambda: len(seen) >= 4, 10, "three messages and one retry")
    counts = Counter(m.text for m in seen)
    assert counts == {"0": 1, "1": 2, "2": 1}


async def test_async_concurrency_is_bounded(
    aconsumers: MakeConsumer, aproducers: MakeProducer
) -> None:
    running, peak, done = 0, 0, 0
    consumer = aconsumers(concurrency=3)

    @consumer.subscribe("transfers")
    async def slow(message: Message) -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.1)
        running -= 1
        done += 1

    await _send(aproducers, 9)
    async with consumer:
        await eventually(lambda: done >= 9, 10, "nine messages")
    assert 1 < peak <= 3


async def test_async_orderly(aconsumers: MakeConsumer, aproducers: MakeProducer) -> None:
    order: dict[str, list[int]] = defaultdict(list)
    failed: set[str] = set()
    consumer = aconsumers(orderly=True, concurrency=4, group="smith-orderly")

    @consumer.subscribe("transfers")
    async def credit(message: Message) -> ConsumeResult:
        account, n = message.text.split(":")
        if int(n) == 1 and message.msg_id not in failed:
            failed.add(message.msg_id)
            return ConsumeResult.RECONSUME_LATER
        order[account].append(int(n))
        return ConsumeResult.CONSUME_SUCCESS

    producer = aproducers("sender")
    for n in range(3):
        for account in "ab":
            await producer.send(Message("transfers", body=f"{account}:{n}", sharding_key=account))
    async with consumer:
        await eventually(lambda: sum(map(len, order.values())) >= 6, 20, "six messages")
    assert order == {"a": [0, 1, 2], "b": [0, 1, 2]}


async def test_async_manual_and_batch_acks(
    aconsumers: MakeConsumer, aproducers: MakeProducer, ainproc: InProcessBroker
) -> None:
    manual = aconsumers(group="smith-manual", ack_mode=AckMode.MANUAL)
    batch = aconsumers(group="smith-batch", ack_mode=AckMode.BATCH, batch_ack=BatchAck(4, 0.2))
    acks: list[int] = []

    async def count_acks(request: httpx.Request) -> None:
        if request.url.path.endswith("/ack"):
            acks.append(len(httpx.Response(200, content=request.content).json()["receipt_handles"]))

    batch.client.http.event_hooks["request"].append(count_acks)

    @manual.subscribe("transfers")
    async def by_hand(message: Message) -> None:
        await manual.ack(message)

    @batch.subscribe("transfers")
    async def gathered(message: Message) -> None:
        pass

    await _send(aproducers, 8)
    async with manual, batch:
        for group in ("smith-manual", "smith-batch"):
            await eventually_async(partial(_settled, ainproc, group), 10, f"{group} settled")
    assert sum(acks) == 8
    assert max(acks) <= 4


async def eventually_async(predicate: Callable[[], Any], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


async def test_async_inbox_under_forced_redelivery(
    bank: Bank, aconsumers: MakeConsumer, aproducers: MakeProducer, ainproc: InProcessBroker
) -> None:
    ran: Counter[str] = Counter()

    def credit(session: Session, message: Message) -> None:
        ran[message.keys[0]] += 1
        session.execute(
            update(effects)
            .where(effects.c.key == message.keys[0])
            .values(amount=effects.c.amount + 1)
        )
        if ran[message.keys[0]] == 1:
            time.sleep(1.2)  # past the invisibility: delivered again meanwhile

    with bank.Session.begin() as session:
        session.execute(insert(effects), [{"key": f"k-{i}", "amount": 0} for i in range(2)])
    members = [aconsumers(client_id=f"m-{n}", invisible_seconds=0.5) for n in range(2)]
    for member in members:
        member.subscribe("transfers", idempotent=bank.Session)(credit)
    await _send(aproducers, 2)
    for member in members:
        await member.start()
    await eventually_async(lambda: _settled(ainproc), 20, "settled")
    with bank.engine.connect() as conn:
        amounts = dict(conn.execute(select(effects.c.key, effects.c.amount)).all())
    assert amounts == {"k-0": 1, "k-1": 1}


async def test_async_graceful_shutdown_releases_what_it_holds(
    aconsumers: MakeConsumer, aproducers: MakeProducer
) -> None:
    seen: list[str] = []
    started = asyncio.Event()
    first = aconsumers(client_id="first", concurrency=1, batch_size=4)

    @first.subscribe("transfers")
    async def slow(message: Message) -> None:
        started.set()
        await asyncio.sleep(0.4)
        seen.append(message.text)

    await _send(aproducers, 4)
    await first.start()
    await asyncio.wait_for(started.wait(), 10)
    await first.shutdown()
    assert len(seen) >= 1
    second = aconsumers(client_id="second")
    second.subscribe("transfers")(lambda m: seen.append(m.text))
    began = time.monotonic()
    async with second:
        await eventually(lambda: len(seen) >= 4, 10, "the released messages")
    assert time.monotonic() - began < 5
    assert sorted(seen) == ["0", "1", "2", "3"]


async def test_async_consumer_over_real_http(sqlite_broker_process: BrokerProcess) -> None:
    url = sqlite_broker_process.url
    producer = AsyncTransactionProducer("sender-http", brokers=[url])
    await producer.create_topic("payments", queues=2)
    consumer = AsyncPushConsumer(
        "smith-http", brokers=[url], wait_seconds=0.5, consume_from="FIRST_OFFSET"
    )
    seen: list[str] = []
    consumer.subscribe("payments")(lambda m: seen.append(m.text))
    for n in range(5):
        await producer.send(Message("payments", body=str(n)))
    async with consumer:
        await eventually(lambda: len(seen) >= 5, 10, "five messages")
    await producer.shutdown()
    assert sorted(seen) == ["0", "1", "2", "3", "4"]
