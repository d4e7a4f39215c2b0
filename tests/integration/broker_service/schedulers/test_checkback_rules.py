"""Check-back rules that need no producer process: a half whose topic is gone is parked, not checked
forever; resolved transactions keep their op records; metrics show pending halves by age."""

from __future__ import annotations

import asyncio

from broker_service.store.schema import messages
from tests.store_check import rows
from tests.support import BrokerApp

FAST = {
    "transaction_timeout_seconds": 0.2,
    "transaction_check_interval_seconds": 0.2,
}


async def _wait_state(broker: BrokerApp, txid: str, state: str) -> dict[str, object]:
    for _ in range(100):  # bounded: 10 s
        shown: dict[str, object] = (await broker.client.get(f"/v1/transactions/{txid}")).json()
        if shown["state"] == state:
            return shown
        await asyncio.sleep(0.1)
    raise AssertionError(f"{txid} never became {state}: {shown}")


async def test_a_half_whose_topic_is_deleted_is_parked(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, **FAST) as broker:
        await broker.topic("doomed", queues=1)
        resolved = await broker.client.post(
            "/v1/transactions", json={"body": "a", "topic": "doomed", "producer_group": "g"}
        )
        done = resolved.json()["transaction_id"]
        await broker.client.post(f"/v1/transactions/{done}/commit", json={"producer_group": "g"})
        pending = await broker.client.post(
            "/v1/transactions", json={"body": "b", "topic": "doomed", "producer_group": "g"}
        )
        txid = pending.json()["transaction_id"]
        assert (await broker.client.delete("/v1/topics/doomed")).status_code == 204
        await _wait_state(broker, txid, "DISCARDED")
        parked = rows(
            migrated_url,
            messages,
            messages.c.transaction_id == txid,
            messages.c.topic == "RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC",
        )
        assert len(parked) == 1
        assert '"DISCARD_REASON":"TOPIC_DELETED"' in parked[0].properties
        ops = rows(migrated_url, messages, messages.c.topic == "RMQ_SYS_TRANS_OP_HALF_TOPIC")
        assert [op.transaction_id for op in ops] == [done], "resolved op state is kept"
        assert (await broker.client.get(f"/v1/transactions/{done}")).json()["state"] == "COMMITTED"
        commit = await broker.client.post(
            f"/v1/transactions/{txid}/commit", json={"producer_group": "g"}
        )
        assert commit.status_code == 404
        assert commit.json()["error"]["code"] == "TOPIC_NOT_FOUND"
        rollback = await broker.client.post(
            f"/v1/transactions/{txid}/rollback", json={"producer_group": "g"}
        )
        assert rollback.status_code == 200


async def test_metrics_show_pending_halves_and_skipped_checks(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, **FAST) as broker:
        await broker.topic("t", queues=1)
        for _ in range(3):
            await broker.client.post(
                "/v1/transactions", json={"body": "x", "topic": "t", "producer_group": "nobody"}
            )
        await asyncio.sleep(1.0)
        text = (await broker.client.get("/metrics")).text
        assert 'halfmq_pending_halves{older_than_seconds="0"} 3.0' in text
        skipped = [
            line for line in text.splitlines()
            if line.startswith('halfmq_checks_total{outcome="skipped_no_producer"}')
        ]  # fmt: skip
        assert skipped
        assert float(skipped[0].split()[-1]) >= 3
        listed = (await broker.client.get("/v1/transactions", params={"state": "PREPARED"})).json()
        assert {t["check_times"] for t in listed["transactions"]} == {0}
