"""A framework producer's commit and rollback name its instance (``client_id``): the broker's
message trace then says who decided -- that instance, not just "producer" -- on both faces and
both stores, against the real broker in this process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from framework import (
    AsyncTransactionProducer,
    CheckMode,
    LocalTransactionState,
    Message,
    TransactionProducer,
)
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import FAST

State = LocalTransactionState


def _decision(broker: InProcessBroker, msg_id: str) -> dict[str, Any]:
    with broker.client() as client:
        events = client.get(f"/v1/messages/{msg_id}/trace").json()["events"]
    [event] = [e for e in events if e["event"] in ("COMMITTED", "ROLLED_BACK")]
    return dict(event)


@pytest.fixture
def broker(migrated_url: str) -> Iterator[InProcessBroker]:
    with InProcessBroker(database_url=migrated_url, **FAST) as running:
        running.create_topic("transfers")
        yield running


def test_the_sync_producers_decisions_are_traced_by_its_client_id(broker: InProcessBroker) -> None:
    producer = TransactionProducer(
        "bob-bank",
        brokers=[broker.url],
        transport=broker.transport,
        check=CheckMode.none(),
        client_id="bob-host:1:sync",
    )
    answers = iter([State.COMMIT_MESSAGE, State.ROLLBACK_MESSAGE])
    producer.execute_local_transaction("transfers")(lambda message, arg: next(answers))
    try:
        committed = producer.send_message_in_transaction(Message("transfers", body="debit 1"))
        rolled_back = producer.send_message_in_transaction(Message("transfers", body="debit 2"))
    finally:
        producer.shutdown()
    event = _decision(broker, committed.msg_id)
    assert (event["event"], event["by"]) == ("COMMITTED", "bob-host:1:sync")
    assert event["detail"]["resolved_by"] == "producer"
    event = _decision(broker, rolled_back.msg_id)
    assert (event["event"], event["by"]) == ("ROLLED_BACK", "bob-host:1:sync")


async def test_the_asyncio_producers_commit_is_traced_by_its_client_id(
    migrated_url: str,
) -> None:
    async with InProcessBroker(database_url=migrated_url, **FAST) as broker:
        await broker.acreate_topic("transfers")
        producer = AsyncTransactionProducer(
            "bob-bank",
            brokers=[broker.url],
            transport=broker.async_transport,
            check=CheckMode.none(),
        )
        producer.execute_local_transaction("transfers")(lambda message, arg: State.COMMIT_MESSAGE)
        try:
            sent = await producer.send_message_in_transaction(Message("transfers", body="1"))
        finally:
            await producer.shutdown()
        async with broker.async_client() as client:
            answer = await client.get(f"/v1/messages/{sent.msg_id}/trace")
        [event] = [e for e in answer.json()["events"] if e["event"] == "COMMITTED"]
        assert event["by"] == producer.client_id  # the default one: host, process, a random part
        async with broker.async_client() as client:
            record = (await client.get(f"/v1/transactions/{sent.transaction_id}")).json()
        assert record["resolved_client"] == producer.client_id
