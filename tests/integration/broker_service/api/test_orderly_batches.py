"""An orderly group's batches (issue 31, item 2): one receive hands out up to ``max_per_queue``
consecutive messages of a queue, nothing more of that queue while they are open, and when the
batch's head fails the released rest waits behind it and comes back with it, in order."""

from __future__ import annotations

import asyncio
import time

from tests.support import BrokerApp

GROUP = "ledger"


async def _setup(broker: BrokerApp) -> None:
    client = broker.client
    topic = {"name": "orders", "queues": 1, "order": True}
    assert (await client.post("/v1/topics", json=topic)).is_success
    group = {"name": GROUP, "consume_from": "FIRST_OFFSET", "orderly": True}
    assert (await client.post("/v1/consumer-groups", json=group)).is_success
    subscribe = {"topic": "orders"}
    assert await client.post(f"/v1/consumer-groups/{GROUP}/subscriptions", json=subscribe)
    for n in range(6):
        message = {"body": f"m{n}", "sharding_key": "acct-1"}
        assert (await client.post("/v1/topics/orders/messages", json=message)).is_success


async def _receive(broker: BrokerApp, **extra: object) -> list[dict[str, object]]:
    body = {"client_id": "c-1", "max_messages": 32, "invisible_seconds": 30, **extra}
    answer = await broker.client.post(f"/v1/consumer-groups/{GROUP}/receive", json=body)
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, object]] = answer.json()["messages"]
    return messages


async def test_one_receive_hands_out_a_queues_batch_and_its_rest_waits_behind_a_failed_head(
    migrated_url: str,
) -> None:
    async with BrokerApp.start(database_url=migrated_url, message_delay_level="2s 4s 6s") as broker:
        await _setup(broker)
        # without max_per_queue: one message of the queue at a time, as ever
        single = await _receive(broker)
        assert [m["body"] for m in single] == ["m0"]
        ack = {"receipt_handles": [single[0]["receipt_handle"]]}
        assert (await broker.client.post(f"/v1/consumer-groups/{GROUP}/ack", json=ack)).is_success
        batch = await _receive(broker, max_per_queue=4)
        assert [m["body"] for m in batch] == ["m1", "m2", "m3", "m4"]
        assert await _receive(broker, max_per_queue=4) == []  # nothing newer while they are open
        handles = [str(m["receipt_handle"]) for m in batch]
        # m1 done, m2 failed (retried in place at level 1: 2 s), m3 and m4 released at once
        done = {"receipt_handles": handles[:1]}
        assert await broker.client.post(f"/v1/consumer-groups/{GROUP}/ack", json=done)
        nack = {"receipt_handle": handles[1], "delay_level": 1}
        nacked = await broker.client.post(f"/v1/consumer-groups/{GROUP}/nack", json=nack)
        assert nacked.json()["outcome"] == "RETRY_IN_PLACE", nacked.text
        for handle in handles[2:]:
            release = {"receipt_handle": handle, "invisible_seconds": 0.001}
            answer = await broker.client.post(
                f"/v1/consumer-groups/{GROUP}/change-invisible", json=release
            )
            assert answer.is_success, answer.text
        await asyncio.sleep(0.3)
        # m3 and m4 are due, but their head is not: none of them comes back before it
        assert await _receive(broker, max_per_queue=4) == []
        deadline = time.monotonic() + 15
        again: list[dict[str, object]] = []
        while not again and time.monotonic() < deadline:
            again = await _receive(broker, max_per_queue=4, wait_seconds=1)
        assert [m["body"] for m in again] == ["m2", "m3", "m4"]  # the head first, then the rest
        assert again[0]["reconsume_times"] == 1
