"""Retry, failover and time-outs against real brokers and real sockets (subprocess broker on real
HTTP); the retry decisions themselves are tested without I/O in test_protocol.py."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from framework import (
    AsyncTransactionProducer,
    BrokerUnavailableError,
    CheckMode,
    LocalTransactionState,
    Message,
    Retry,
    Timeout,
    TransactionProducer,
)
from framework.consumer import PushConsumer
from tests.integration.framework.helpers import await_resolved
from tests.support import BrokerProcess, free_port, wait_until

State = LocalTransactionState
FAST_RETRY = Retry(attempts=3, backoff=0.01)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A socket that accepts connections and never answers (a hung broker)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_sync_transaction_over_real_http_fails_over_from_a_dead_broker(
    sqlite_broker_process: BrokerProcess,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    producer = TransactionProducer(
        "bob-bank",
        brokers=[dead, sqlite_broker_process.url],
        retry=FAST_RETRY,
        check=CheckMode.pull(wait_seconds=0.3),
    )
    producer.execute_local_transaction("transfers")(lambda m, a: State.COMMIT_MESSAGE)
    with producer:
        producer.create_topic("transfers", queues=2)
        result = producer.send_message_in_transaction(Message("transfers", body="x"))
        assert producer.client.endpoints.current == 1  # sticky on the broker that answered
        assert producer.transaction(result.transaction_id)["state"] == "COMMITTED"


async def test_async_transaction_over_real_http_fails_over(
    sqlite_broker_process: BrokerProcess,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    producer = AsyncTransactionProducer(
        "bob-bank-async",
        brokers=[dead, sqlite_broker_process.url],
        retry=FAST_RETRY,
        check=CheckMode.pull(wait_seconds=0.3),
    )
    producer.execute_local_transaction("transfers")(lambda m, a: None)
    producer.check_local_transaction("transfers")(lambda m: State.ROLLBACK_MESSAGE)
    async with producer:
        await producer.create_topic("transfers", queues=2)
        result = await producer.send_message_in_transaction(Message("transfers", body="x"))
        record = await await_resolved(producer, result.transaction_id)
    assert (record["state"], record["resolved_by"]) == ("ROLLED_BACK", "check")


def test_no_broker_answers_is_broker_unavailable_with_its_fields() -> None:
    urls = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    producer = TransactionProducer("bob-bank", brokers=urls, retry=FAST_RETRY)
    with pytest.raises(BrokerUnavailableError) as info:
        producer.send(Message("transfers", body="x"))
    producer.shutdown()
    assert info.value.attempts == 3
    assert info.value.urls == tuple(urls)
    assert info.value.topic == "transfers"
    assert info.value.msg_id is not None


def test_a_hung_broker_times_out(silent_server: str) -> None:
    producer = TransactionProducer(
        "bob-bank",
        brokers=[silent_server],
        retry=Retry(attempts=2, backoff=0.01),
        timeout=Timeout(connect=0.5, read=0.2, write=0.5, pool=0.5),
    )
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError):
        producer.send(Message("transfers", body="x"))
    producer.shutdown()
    assert time.monotonic() - started < 3


def test_the_local_transaction_never_runs_when_the_half_is_not_stored() -> None:
    producer = TransactionProducer(
        "bob-bank", brokers=[f"http://127.0.0.1:{free_port()}"], retry=FAST_RETRY
    )
    ran: list[Message] = []
    producer.execute_local_transaction("transfers")(lambda m, a: ran.append(m))
    with pytest.raises(BrokerUnavailableError):
        producer.send_message_in_transaction(Message("transfers", body="x"))
    producer.shutdown()
    assert ran == []


def test_sync_consumer_over_real_http_fails_over(sqlite_broker_process: BrokerProcess) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    producer = TransactionProducer("sender-http", brokers=[sqlite_broker_process.url])
    producer.create_topic("deposits", queues=2)
    seen: list[str] = []
    consumer = PushConsumer(
        "smith-http",
        brokers=[dead, sqlite_broker_process.url],
        retry=FAST_RETRY,
        wait_seconds=0.5,
        consume_from="FIRST_OFFSET",
    )
    consumer.subscribe("deposits")(lambda m: seen.append(m.text))
    for n in range(5):
        producer.send(Message("deposits", body=str(n)))
    producer.shutdown()
    with consumer:
        wait_until(lambda: len(seen) >= 5, 10, "five messages")
    assert sorted(seen) == ["0", "1", "2", "3", "4"]
