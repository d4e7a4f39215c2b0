"""Batch consumption with the user's database (issue 31, item 2), on the in-process test broker
(``halfmq.testing.InProcessBroker``) and the user's SQLite or PostgreSQL:

* the inbox deduplicates per message inside a batch -- a key already handled, and a key twice in
  the same batch, never reach the handler -- and a returned index gives the rest their inbox
  rows back, so they are handled when they come again: one effect per key;
* a transacted batch that raises rolls back and retries the whole batch;
* a batch consumer runs under ``framework.fastapi.halfmq_lifespan``.

The brokers retry after the test delay levels (``LEVELS``: 300 ms for a first retry, not 10 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from framework import AsyncPushConsumer, AsyncTransactionProducer, Message, TransactionProducer
from framework.consumer import PushConsumer
from framework.fastapi import halfmq_lifespan
from framework.tables import inbox
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import LEVELS, Bank, effects
from tests.support import wait_until

GROUP = "smith-batch"
KEYS = ["k-0", "k-1", "k-1", "k-2", "k-3"]  # k-1 twice (two messages); k-3 handled before


def _seed_inbox(bank: Bank) -> None:
    """k-3 was handled by an earlier delivery: its inbox row is there."""
    row = {"consumer_group": GROUP, "dedup_key": "k-3", "msg_id": "m", "topic": "batched"}
    with bank.Session.begin() as session:
        session.execute(insert(inbox).values(created_at=0, **row))


def _messages() -> list[Message]:
    return [Message("batched", body=str(n), keys=[key]) for n, key in enumerate(KEYS)]


def _group(broker: InProcessBroker) -> dict[str, Any]:
    with broker.client() as client:
        view: dict[str, Any] = client.get(f"/v1/consumer-groups/{GROUP}").json()
        return view


def _settled(broker: InProcessBroker) -> bool:
    view = _group(broker)
    return bool(view["lag"] == 0 and view["in_flight"] == 0 and view["retrying"] == 0)


def _inbox_keys(bank: Bank) -> list[str]:
    with bank.engine.connect() as conn:
        return sorted(conn.execute(select(inbox.c.dedup_key)).scalars())


def _amounts(bank: Bank) -> dict[str, int]:
    with bank.engine.connect() as conn:
        return {
            key: amount for key, amount in conn.execute(select(effects.c.key, effects.c.amount))
        }


def _expect_one_effect_per_key(calls: list[list[str]], bank: Bank) -> None:
    assert calls[0] == ["k-0", "k-1", "k-2"]  # not k-3 (the inbox had it), k-1 once
    assert sorted(k for call in calls[1:] for k in call) == ["k-1", "k-2"]  # exactly the rest
    assert _amounts(bank) == {"k-0": 1, "k-1": 1, "k-2": 1}
    assert _inbox_keys(bank) == ["k-0", "k-1", "k-2", "k-3"]


def test_the_inbox_deduplicates_inside_a_batch(bank: Bank) -> None:
    calls: list[list[str]] = []

    def credit(session: Session, messages: list[Message]) -> int | None:
        first_call = not calls
        calls.append([m.keys[0] for m in messages])
        done = messages[:1] if first_call else messages  # the first call: only k-0 succeeds
        for message in done:
            session.execute(insert(effects).values(key=message.keys[0], amount=1))
        return 1 if first_call else None

    _seed_inbox(bank)
    with InProcessBroker(message_delay_level=LEVELS) as broker:
        broker.create_topic("batched", queues=1)
        with TransactionProducer("sender", brokers=[broker.url], transport=broker.transport) as p:
            for message in _messages():
                p.send(message)
        consumer = PushConsumer(
            GROUP, brokers=[broker.url], transport=broker.transport, wait_seconds=0.5,
            consume_from="FIRST_OFFSET", batch_size=10,
        )  # fmt: skip
        consumer.subscribe("batched", idempotent=bank.Session, batch_max=10)(credit)
        with consumer:
            wait_until(lambda: _settled(broker) and len(calls) >= 2, 20, "every message settled")
    _expect_one_effect_per_key(calls, bank)


async def test_the_inbox_deduplicates_inside_a_batch_async(bank: Bank) -> None:
    """The asyncio face with an ``async_sessionmaker`` (aiosqlite, psycopg's async)."""
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio needs greenlet")
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

    url = bank.url.replace("sqlite://", "sqlite+aiosqlite://")
    if url.startswith("sqlite+aiosqlite"):
        pytest.importorskip("aiosqlite")
    engine = create_async_engine(url)
    calls: list[list[str]] = []

    async def credit(session: AsyncSession, messages: list[Message]) -> int | None:
        first_call = not calls
        calls.append([m.keys[0] for m in messages])
        for message in messages[:1] if first_call else messages:
            await session.execute(insert(effects).values(key=message.keys[0], amount=1))
        return 1 if first_call else None

    _seed_inbox(bank)
    try:
        async with InProcessBroker(message_delay_level=LEVELS) as broker:
            await broker.acreate_topic("batched", queues=1)
            producer = AsyncTransactionProducer(
                "sender", brokers=[broker.url], transport=broker.async_transport
            )
            async with producer:
                for message in _messages():
                    await producer.send(message)
            consumer = AsyncPushConsumer(
                GROUP, brokers=[broker.url], transport=broker.async_transport, wait_seconds=0.5,
                consume_from="FIRST_OFFSET", batch_size=10,
            )  # fmt: skip
            sessions = async_sessionmaker(engine)
            consumer.subscribe("batched", idempotent=sessions, batch_max=10)(credit)
            async with consumer:
                await _until(lambda: len(calls) >= 2, broker, "every message settled")
    finally:
        await engine.dispose()
    _expect_one_effect_per_key(calls, bank)


def test_a_transacted_batch_that_raises_rolls_back_and_retries_the_batch(bank: Bank) -> None:
    calls: list[list[str]] = []

    def credit(session: Session, messages: list[Message]) -> None:
        calls.append([m.text for m in messages])
        for message in messages:
            session.execute(insert(effects).values(key=message.text, amount=1))
        if len(calls) == 1:
            raise RuntimeError("the ledger is locked: nothing of the batch is written")

    with InProcessBroker(message_delay_level=LEVELS) as broker:
        broker.create_topic("batched", queues=1)
        with TransactionProducer("sender", brokers=[broker.url], transport=broker.transport) as p:
            for n in range(3):
                p.send(Message("batched", body=str(n)))
        consumer = PushConsumer(
            GROUP, brokers=[broker.url], transport=broker.transport, wait_seconds=0.5,
            consume_from="FIRST_OFFSET", batch_size=10,
        )  # fmt: skip
        consumer.subscribe("batched", session_factory=bank.Session, batch_max=10)(credit)
        with consumer:
            wait_until(lambda: _settled(broker) and len(bank.effects()) == 3, 20, "the retry")
    assert calls[0] == ["0", "1", "2"]
    assert sorted(b for call in calls[1:] for b in call) == ["0", "1", "2"]
    assert _amounts(bank) == {"0": 1, "1": 1, "2": 1}


async def test_a_batch_consumer_runs_under_the_fastapi_lifespan() -> None:
    calls: list[list[str]] = []
    async with InProcessBroker(message_delay_level=LEVELS) as broker:
        await broker.acreate_topic("batched", queues=1)
        consumer = AsyncPushConsumer(
            GROUP, brokers=[broker.url], transport=broker.async_transport, wait_seconds=0.5,
            consume_from="FIRST_OFFSET", batch_size=10,
        )  # fmt: skip

        @consumer.subscribe("batched", batch_max=3)
        async def credit(messages: list[Message]) -> None:
            calls.append([m.text for m in messages])

        producer = AsyncTransactionProducer(
            "sender", brokers=[broker.url], transport=broker.async_transport
        )
        async with producer:
            for n in range(7):
                await producer.send(Message("batched", body=str(n)))
        app = FastAPI(lifespan=halfmq_lifespan(consumer))
        async with LifespanManager(app):
            assert consumer.started
            await _until(lambda: sum(map(len, calls)) >= 7, broker, "seven messages")
        assert not consumer.started
    assert [b for call in calls for b in call] == [str(n) for n in range(7)]  # one queue, in order
    assert max(map(len, calls)) == 3


async def _asettled(broker: InProcessBroker) -> bool:
    async with broker.async_client() as client:
        view = (await client.get(f"/v1/consumer-groups/{GROUP}")).json()
    return bool(view["lag"] == 0 and view["in_flight"] == 0 and view["retrying"] == 0)


async def _until(
    predicate: Callable[[], bool], broker: InProcessBroker, what: str, within: float = 20
) -> None:
    """Until ``predicate`` holds and the group has settled every message."""
    deadline = time.monotonic() + within
    while not (predicate() and await _asettled(broker)):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.1)
