"""A broker killed with SIGKILL mid-load loses nothing it acknowledged and shows nothing half-written."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from broker_service.store.schema import messages, transactions
from tests.store_check import assert_offsets_dense, assert_transactions_consistent, rows
from tests.support import BrokerProcess

pytestmark = pytest.mark.slow


async def _load(url: str, acked: dict[str, list[Any]], stop: asyncio.Event, n: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=5) as client:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                if i % 2:
                    body = {"body": f"w{n}-{i}", "msg_id": f"w{n}-{i}"}
                    sent = await client.post("/v1/topics/load/messages", json=body)
                    if sent.status_code == 201:
                        acked["sends"].append(sent.json())
                    continue
                half = await client.post(
                    "/v1/transactions",
                    json={"body": f"t{n}-{i}", "topic": "load", "producer_group": "crash"},
                )
                if half.status_code != 201:
                    continue
                txid = half.json()["transaction_id"]
                acked["halves"].append(txid)
                commit = await client.post(
                    f"/v1/transactions/{txid}/commit", json={"producer_group": "crash"}
                )
                if commit.status_code == 200:
                    acked["commits"].append(commit.json())
            except httpx.HTTPError:
                return  # the broker is gone


async def test_sigkill_mid_load_keeps_everything_acknowledged(
    broker_process: BrokerProcess,
) -> None:
    async with httpx.AsyncClient(base_url=broker_process.url) as client:
        await client.post("/v1/topics", json={"name": "load", "queues": 4})
    acked: dict[str, list[Any]] = {"sends": [], "halves": [], "commits": []}
    stop = asyncio.Event()
    workers = [asyncio.create_task(_load(broker_process.url, acked, stop, n)) for n in range(16)]
    for _ in range(100):  # bounded: until enough has been acknowledged
        await asyncio.sleep(0.05)
        if len(acked["commits"]) >= 100 and len(acked["sends"]) >= 200:
            break
    broker_process.kill()
    stop.set()
    for worker in workers:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(worker, 10)
    assert acked["sends"], "the load ran before the kill"
    assert acked["commits"], "the load ran before the kill"

    url = broker_process.database_url
    broker_process.start()  # same store, new process
    stored = {(r.topic, r.queue_id, r.queue_offset): r for r in rows(url, messages)}
    for send in acked["sends"]:
        row = stored.get(("load", send["queue_id"], send["queue_offset"]))
        assert row is not None, f"lost {send}"
        assert row.msg_id == send["msg_id"]
    states = {r.transaction_id: r.state for r in rows(url, transactions)}
    for txid in acked["halves"]:
        assert txid in states, f"lost half {txid}"
    for commit in acked["commits"]:
        assert states[commit["transaction_id"]] == "COMMITTED"
        row = stored[("load", commit["queue_id"], commit["queue_offset"])]
        assert row.transaction_id == commit["transaction_id"]
    assert_offsets_dense(url)
    assert_transactions_consistent(url)

    async with httpx.AsyncClient(base_url=broker_process.url) as client:
        after = await client.post("/v1/topics/load/messages", json={"body": "after", "queue_id": 0})
        assert after.status_code == 201
        zero = sum(1 for key in stored if key[0] == "load" and key[1] == 0)
        assert after.json()["queue_offset"] == zero
