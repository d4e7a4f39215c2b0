"""Delayed messages reach their real topic at their time -- not before, and once -- on both stores."""

from __future__ import annotations

import asyncio

import pytest

from broker_service.store.schema import messages
from tests.store_check import assert_offsets_dense, rows
from tests.support import BrokerApp
from tests.unit.broker_service.domain.conftest import SQL_STORES


async def _max_offset(broker: BrokerApp, topic: str) -> int:
    shown = (await broker.client.get(f"/v1/topics/{topic}")).json()
    return int(shown["queue_offsets"][0]["max_offset"])


# SQL stores only (here and below): it reads the messages table itself.
@pytest.mark.parametrize("store_url", SQL_STORES, indirect=True)
async def test_delayed_messages_are_released_at_their_time(migrated_url: str) -> None:
    async with BrokerApp.start(
        database_url=migrated_url, message_delay_level="400ms 800ms"
    ) as broker:
        await broker.topic("t", queues=1)
        level = await broker.client.post(
            "/v1/topics/t/messages", json={"body": "a", "delay_level": 1}
        )
        at = await broker.client.post(
            "/v1/topics/t/messages",
            json={"body": "b", "deliver_at": level.json()["deliver_at"]},
        )
        assert level.status_code == at.status_code == 201
        assert await _max_offset(broker, "t") == 0, "not before their time"
        for _ in range(50):  # bounded wait, up to 5 s
            if await _max_offset(broker, "t") == 2:
                break
            await asyncio.sleep(0.1)
        assert await _max_offset(broker, "t") == 2
        for receipt in (level.json(), at.json()):
            life = (await broker.client.get(f"/v1/messages/{receipt['msg_id']}")).json()
            assert life["stage"] == "STORED"
            assert life["topic"] == "t"
        await asyncio.sleep(0.5)
        released = rows(migrated_url, messages, messages.c.topic == "t")
        assert len(released) == 2, "released once"
        for row in released:
            assert row.stored_at >= row.deliver_at, "not early"
        assert_offsets_dense(migrated_url)


@pytest.mark.parametrize("store_url", SQL_STORES, indirect=True)
async def test_delayed_transactional_message_is_released_after_commit(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, message_delay_level="300ms") as broker:
        await broker.topic("t", queues=1)
        half = await broker.client.post(
            "/v1/transactions",
            json={"body": "x", "topic": "t", "producer_group": "g", "delay_level": 1},
        )
        await asyncio.sleep(0.6)  # the delay counts from the commit, not the half
        assert await _max_offset(broker, "t") == 0
        txid = half.json()["transaction_id"]
        await broker.client.post(f"/v1/transactions/{txid}/commit", json={"producer_group": "g"})
        assert await _max_offset(broker, "t") == 0
        for _ in range(50):
            if await _max_offset(broker, "t") == 1:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        real = rows(migrated_url, messages, messages.c.topic == "t")
        assert len(real) == 1, "delivered once"
        assert real[0].transaction_id == txid


async def test_key_search_leaves_out_the_brokers_own_topics(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    half = await broker.client.post(
        "/v1/transactions", json={"body": "x", "topic": "t", "producer_group": "g", "keys": ["k"]}
    )
    txid = half.json()["transaction_id"]
    await broker.client.post(f"/v1/transactions/{txid}/commit", json={"producer_group": "g"})
    found = (await broker.client.get("/v1/messages", params={"key": "k"})).json()["messages"]
    assert [m["topic"] for m in found] == ["t"]
    halves = (
        await broker.client.get(
            "/v1/messages", params={"key": "k", "topic": "RMQ_SYS_TRANS_HALF_TOPIC"}
        )
    ).json()["messages"]
    assert len(halves) == 1
