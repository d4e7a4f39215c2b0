"""Concurrency over real HTTP against a real broker process, on both stores."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import httpx
import pytest

from broker_service.store.schema import messages
from tests.store_check import assert_offsets_dense, assert_transactions_consistent, rows
from tests.support import BrokerProcess

pytestmark = pytest.mark.slow

SENDERS = 50
PER_SENDER = 20


async def test_50_senders_with_retransmits_store_each_message_once(
    broker_process: BrokerProcess,
) -> None:
    rng = random.Random(7)
    async with httpx.AsyncClient(base_url=broker_process.url, timeout=30) as client:
        await client.post("/v1/topics", json={"name": "load", "queues": 4})

        async def sender(n: int) -> list[dict[str, object]]:
            answers = []
            for i in range(PER_SENDER):
                body = {"body": f"{n}-{i}", "msg_id": f"s{n}-m{i}", "keys": [f"k{n}"]}
                copies = 1 + (rng.random() < 0.3) + (rng.random() < 0.1)
                responses = await asyncio.gather(
                    *[client.post("/v1/topics/load/messages", json=body) for _ in range(copies)]
                )
                for response in responses:
                    assert response.status_code == 201, response.text
                first = {k: v for k, v in responses[0].json().items() if k != "duplicate"}
                for response in responses[1:]:
                    assert {k: v for k, v in response.json().items() if k != "duplicate"} == first
                assert sum(not r.json()["duplicate"] for r in responses) == 1
                answers.append(responses[0].json())
            return answers

        results = await asyncio.gather(*[sender(n) for n in range(SENDERS)])

    stored = rows(broker_process.database_url, messages, messages.c.topic == "load")
    counts = Counter(row.msg_id for row in stored)
    assert len(counts) == SENDERS * PER_SENDER
    assert set(counts.values()) == {1}, "a retransmit was stored twice"
    where = {row.msg_id: (row.queue_id, row.queue_offset) for row in stored}
    for answers in results:
        for answer in answers:
            assert where[str(answer["msg_id"])] == (answer["queue_id"], answer["queue_offset"])
    assert_offsets_dense(broker_process.database_url)


async def test_20_concurrent_commits_make_one_real_message(broker_process: BrokerProcess) -> None:
    async with httpx.AsyncClient(base_url=broker_process.url, timeout=30) as client:
        await client.post("/v1/topics", json={"name": "transfers", "queues": 2})
        half = await client.post(
            "/v1/transactions",
            json={"body": "t", "topic": "transfers", "producer_group": "bob"},
        )
        txid = half.json()["transaction_id"]
        commits = await asyncio.gather(
            *[
                client.post(f"/v1/transactions/{txid}/commit", json={"producer_group": "bob"})
                for _ in range(20)
            ]
        )
    assert {c.status_code for c in commits} == {200}
    assert len({c.text for c in commits}) == 1, "every commit answered the same"
    real = rows(
        broker_process.database_url,
        messages,
        messages.c.transaction_id == txid,
        messages.c.topic == "transfers",
    )
    assert len(real) == 1
    assert_transactions_consistent(broker_process.database_url)


async def test_racing_commit_and_rollback_one_wins(broker_process: BrokerProcess) -> None:
    async with httpx.AsyncClient(base_url=broker_process.url, timeout=30) as client:
        await client.post("/v1/topics", json={"name": "transfers", "queues": 1})
        txids = []
        for _ in range(20):
            half = await client.post(
                "/v1/transactions",
                json={"body": "t", "topic": "transfers", "producer_group": "bob"},
            )
            txids.append(half.json()["transaction_id"])
        calls = [
            client.post(f"/v1/transactions/{txid}/{verb}", json={"producer_group": "bob"})
            for txid in txids
            for verb in ("commit", "rollback", "commit", "rollback")
        ]
        answers = await asyncio.gather(*calls)
    for i, txid in enumerate(txids):
        mine = answers[4 * i : 4 * i + 4]
        winners = {a.json()["state"] for a in mine if a.status_code == 200}
        assert len(winners) == 1, f"{txid}: {[a.text for a in mine]}"
        assert all(a.status_code in (200, 409) for a in mine)
    assert_transactions_consistent(broker_process.database_url)
    assert_offsets_dense(broker_process.database_url)
