"""Prompt shutdown: a producer or consumer shut down while its long poll (5 s) is in flight
returns at once, on both faces, and a message that poll brings is given back, not lost; a body a
handler cannot decode is said once, clearly, and goes the failure way (here: the DLQ)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    ConsumeResult,
    Message,
    PushConsumer,
    TransactionProducer,
)
from halfmq.testing import InProcessBroker
from tests.support import wait_until

PROMPT_SECONDS = 1.5  # a behaviour bound: well under the 5 s poll it must not wait out
POLL_SECONDS = 5.0


def _in_its_poll() -> None:
    """Long enough for the receiver to be inside its long poll (registration is done)."""
    time.sleep(0.5)


def _consumer(broker: InProcessBroker, group: str = "smith-bank") -> PushConsumer:
    consumer = PushConsumer(
        group,
        brokers=[broker.url],
        transport=broker.transport,
        wait_seconds=POLL_SECONDS,
        consume_from="FIRST_OFFSET",
    )
    consumer.subscribe("transfers")(lambda message: ConsumeResult.CONSUME_SUCCESS)
    return consumer


def test_a_sync_consumer_and_producer_shut_down_while_polling_return_at_once(
    inproc: InProcessBroker,
) -> None:
    consumer = _consumer(inproc)
    producer = TransactionProducer("bob-bank", brokers=[inproc.url], transport=inproc.transport)
    assert producer.check_mode.kind == "pull"  # its pull of checks is a 5 s long poll too
    with producer, consumer:
        _in_its_poll()
        started = time.monotonic()
    took = time.monotonic() - started
    assert took < PROMPT_SECONDS, f"leaving the with block took {took:.2f} s"


def test_a_message_the_abandoned_poll_brings_is_given_back_at_once(
    inproc: InProcessBroker,
) -> None:
    first = _consumer(inproc)
    first.start()
    _in_its_poll()
    first.shutdown()  # its receiver is still in its poll, answered by the next message
    producer = TransactionProducer("bob-bank", brokers=[inproc.url], transport=inproc.transport)
    producer.send(Message("transfers", body="after the shutdown", keys=["k-1"]))
    got: list[Message] = []
    second = PushConsumer(
        "smith-bank",
        brokers=[inproc.url],
        transport=inproc.transport,
        wait_seconds=1,
        consume_from="FIRST_OFFSET",
    )
    second.subscribe("transfers")(lambda m: got.append(m) or ConsumeResult.CONSUME_SUCCESS)
    with second:
        # well before its 30 s invisibility: the first consumer's receiver released it
        wait_until(lambda: bool(got), 15, "the message the abandoned poll took")
    assert [m.text for m in got] == ["after the shutdown"]
    producer.shutdown()


async def test_an_async_consumer_and_producer_shut_down_while_polling_return_at_once(
    ainproc: InProcessBroker,
) -> None:
    consumer = AsyncPushConsumer(
        "smith-bank",
        brokers=[ainproc.url],
        transport=ainproc.async_transport,
        wait_seconds=POLL_SECONDS,
    )
    consumer.subscribe("transfers")(lambda message: ConsumeResult.CONSUME_SUCCESS)
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[ainproc.url], transport=ainproc.async_transport
    )
    async with producer, consumer:
        await asyncio.sleep(0.5)
        started = time.monotonic()
    took = time.monotonic() - started
    assert took < PROMPT_SECONDS, f"leaving the async with block took {took:.2f} s"


def test_a_body_the_handler_cannot_decode_is_said_once_and_dead_lettered(
    inproc: InProcessBroker, caplog: pytest.LogCaptureFixture
) -> None:
    producer = TransactionProducer("bob-bank", brokers=[inproc.url], transport=inproc.transport)
    sent = [producer.send(Message("transfers", body="hello", keys=[f"k-{n}"])) for n in range(2)]
    consumer = PushConsumer(
        "smith-bank",
        brokers=[inproc.url],
        transport=inproc.transport,
        consume_from="FIRST_OFFSET",
        max_reconsume_times=0,  # a failure goes straight to the DLQ
        wait_seconds=1,
    )

    @consumer.subscribe("transfers")
    def credit(message: Message) -> ConsumeResult:
        message.json()
        return ConsumeResult.CONSUME_SUCCESS

    def dead_letters() -> list[str]:
        with inproc.client() as client:
            answer = client.get("/v1/consumer-groups/smith-bank/dlq").json()
        return sorted(m["msg_id"] for m in answer["messages"])

    with caplog.at_level(logging.DEBUG, logger="halfmq.consumer"), consumer:
        wait_until(lambda: len(dead_letters()) == 2, 30, "both messages in the DLQ")
    producer.shutdown()
    said = [
        r
        for r in caplog.records
        if r.name == "halfmq.consumer" and r.levelno >= logging.WARNING and "hello" in r.message
    ]
    assert len(said) == 1, [r.message for r in said]
    line = said[0].message
    assert "expected JSON" in line
    assert "transfers" in line
    assert any(result.msg_id in line for result in sent)
    assert "JSONDecodeError" not in caplog.text
