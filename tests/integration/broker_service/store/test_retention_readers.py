"""Retention on both stores, for the readers and rows the units in ``test_retention_units.py``
check without a store: a broadcasting group's members, a group's retry topic, a dead-letter
topic's own retention, and the export watermark for deliveries and transactions.

As in ``test_retention.py``: the real broker in process on a real store (a SQLite file, the
machine's PostgreSQL), a :class:`RetentionService` whose clock runs ahead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from broker_service.domain.clock import now_ms
from broker_service.domain.retention.model import PurgeReport
from tests.integration.broker_service.store.test_retention import (
    HOUR,
    POLICY,
    purger,
    send,
    sql,
    subscribe,
)
from tests.support import BrokerApp


@pytest.fixture
async def broker(migrated_url: str) -> AsyncIterator[BrokerApp]:
    # One delay level of 100 ms: a nacked message's retry copy is due at once.
    async with BrokerApp.start(
        database_url=migrated_url,
        scheduler=False,
        retention_wait_for_export=False,
        message_delay_level="100ms",
    ) as app:
        yield app


async def receive(broker: BrokerApp, group: str, client_id: str, n: int) -> list[dict[str, Any]]:
    """``n`` messages for ``client_id``, in offset order."""
    got: list[dict[str, Any]] = []
    for _ in range(20):
        response = await broker.client.post(
            f"/v1/consumer-groups/{group}/receive",
            json={"client_id": client_id, "max_messages": n - len(got), "wait_seconds": 0},
        )
        assert response.status_code == 200, response.text
        got += response.json()["messages"]
        if len(got) >= n:
            break
    assert len(got) == n
    return sorted(got, key=lambda m: m["queue_offset"])


async def ack(broker: BrokerApp, group: str, messages: list[dict[str, Any]]) -> None:
    handles = [m["receipt_handle"] for m in messages]
    response = await broker.client.post(
        f"/v1/consumer-groups/{group}/ack", json={"receipt_handles": handles}
    )
    assert response.status_code == 200, response.text


async def nack(broker: BrokerApp, group: str, message: dict[str, Any]) -> str:
    response = await broker.client.post(
        f"/v1/consumer-groups/{group}/nack",
        json={"receipt_handle": message["receipt_handle"], "delay_level": 1},
    )
    assert response.status_code == 200, response.text
    outcome: str = response.json()["outcome"]
    return outcome


def stored(broker: BrokerApp, topic: str) -> list[str]:
    rows = sql(
        broker, "SELECT msg_id FROM messages WHERE topic = :t ORDER BY queue_offset", t=topic
    )
    return [r[0] for r in rows]


def offsets(broker: BrokerApp, topic: str) -> tuple[int, int]:
    """(min_offset, next_offset) of the topic's queue 0 (also a system topic's, whose name the
    REST path would need escaped)."""
    (row,) = sql(
        broker,
        "SELECT min_offset, next_offset FROM queues WHERE topic = :t AND queue_id = 0",
        t=topic,
    )
    return int(row[0]), int(row[1])


def age(broker: BrokerApp, table: str, column: str, hours: float) -> None:
    """Make every row of ``table`` ``hours`` older (its ``column``)."""
    sql(broker, f"UPDATE {table} SET {column} = {column} - :by", by=int(hours * HOUR))


async def queue_view(broker: BrokerApp, group: str, topic: str) -> dict[str, dict[str, Any]]:
    """The group view's queues of ``topic``, by member."""
    response = await broker.client.get(f"/v1/consumer-groups/{group}")
    assert response.status_code == 200, response.text
    return {q["client_id"] or "": q for q in response.json()["queues"] if q["topic"] == topic}


async def test_a_broadcasting_member_keeps_what_it_has_not_passed_until_it_is_gone(
    broker: BrokerApp, caplog: pytest.LogCaptureFixture
) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "b", "t", message_model="BROADCASTING")
    await send(broker, "t", [f"m{i}" for i in range(6)])
    fast = await receive(broker, "b", "fast", 6)
    slow = await receive(broker, "b", "slow", 6)
    await ack(broker, "b", fast)
    await ack(broker, "b", slow[:2])  # "slow" has passed offsets 0-1; 2-5 are in flight
    # The messages were stored 49 h ago; both members were seen just now.
    age(broker, "messages", "stored_at", 49)

    # The broker's own purge (48 h, no hard limit), as its scheduler runs it.
    assert broker.settings.retention_hard_limit_hours is None
    report = await broker.state.retention.purge()

    assert report.purged["messages"] == 2
    assert [(h.group, h.client_id, h.offset) for h in report.held] == [("b", "slow", 2)]
    assert report.expired == []
    assert stored(broker, "t") == ["m2", "m3", "m4", "m5"]
    assert offsets(broker, "t") == (2, 6)

    # "slow" is not seen for the whole retention: it holds nothing, and what it had not passed
    # goes with no hard limit set -- counted on its position and logged, never silently.
    age(broker, "consumers", "last_seen_at", 49)
    sql(broker, "UPDATE consumers SET last_seen_at = :at WHERE client_id = 'fast'", at=now_ms())
    caplog.set_level(logging.WARNING, logger="halfmq.retention")
    gone = await broker.state.retention.purge()

    assert gone.purged["messages"] == 4
    assert [(e.client_id, e.from_offset, e.to_offset, e.idle_member) for e in gone.expired] == [
        ("slow", 2, 6, True)
    ]
    assert "expired 4 messages of b member slow in t queue 0 (offsets 2-5" in caplog.text
    assert "not seen for the whole retention" in caplog.text
    queues = await queue_view(broker, "b", "t")
    assert (queues["slow"]["expired"], queues["slow"]["committed_offset"]) == (4, 6)
    assert (queues["fast"]["expired"], queues["fast"]["committed_offset"]) == (0, 6)
    assert queues["slow"]["in_flight"] == 0  # its deliveries of purged messages expired
    metrics = (await broker.client.get("/metrics")).text
    assert 'halfmq_retention_expired_messages_total{group="b"} 4.0' in metrics
    assert offsets(broker, "t") == (6, 6)


async def test_a_retry_message_stays_until_its_group_has_passed_it(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "g", "t")
    await send(broker, "t", ["a", "b", "c"])
    got = await receive(broker, "g", "c1", 3)
    await ack(broker, "g", got[:2])
    assert await nack(broker, "g", got[2]) == "RETRY"
    await asyncio.sleep(0.15)
    assert (await broker.state.messages.release_due(100)).released == 1
    assert stored(broker, "%RETRY%g") == ["c"]

    # The group has no position in its retry topic yet: it starts at the head, so it holds it.
    report = await purger(broker, 49).purge()
    assert report.purged["messages"] == 4  # t's three (passed), and the released schedule row
    assert stored(broker, "t") == []
    assert stored(broker, "SCHEDULE_TOPIC_XXXX") == []
    assert stored(broker, "%RETRY%g") == ["c"]
    assert ("%RETRY%g", "g", 0) in {(h.topic, h.group, h.offset) for h in report.held}

    # Received but not acked: still held, at the group's committed offset.
    (retry,) = await receive(broker, "g", "c1", 1)
    assert retry["msg_id"] == "c"
    assert (await purger(broker, 49).purge()).purged["messages"] == 0
    assert stored(broker, "%RETRY%g") == ["c"]

    # Acked: the group has passed it, and it goes.
    await ack(broker, "g", [retry])
    report = await purger(broker, 49).purge()
    assert report.purged["messages"] == 1
    assert report.expired == []
    assert stored(broker, "%RETRY%g") == []
    assert offsets(broker, "%RETRY%g") == (1, 1)
    assert stored(broker, "SCHEDULE_TOPIC_XXXX") == []


async def test_a_dead_letter_stays_for_its_own_retention(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "g", "t", max_reconsume_times=0)
    await send(broker, "t", ["ok", "bad"])
    got = await receive(broker, "g", "c1", 2)
    await ack(broker, "g", got[:1])
    assert await nack(broker, "g", got[1]) == "DLQ"
    assert stored(broker, "%DLQ%g") == ["bad"]
    policy = replace(POLICY, dead_letter_retention_ms=168 * HOUR)

    # Older than retention_hours, younger than dead_letter_retention_hours: only t's go.
    report = await purger(broker, 49, policy).purge()
    assert report.purged["messages"] == 2
    assert stored(broker, "t") == []
    assert stored(broker, "%DLQ%g") == ["bad"]
    response = await broker.client.get("/v1/consumer-groups/g/dlq")
    assert [m["msg_id"] for m in response.json()["messages"]] == ["bad"]
    assert (await purger(broker, 167, policy).purge()).purged["messages"] == 0

    report = await purger(broker, 169, policy).purge()
    assert report.purged["messages"] == 1
    assert report.expired == []
    assert stored(broker, "%DLQ%g") == []
    assert offsets(broker, "%DLQ%g") == (1, 1)


def watermark(broker: BrokerApp, until: int) -> None:
    """The reconciliation export has read everything up to ``until`` (its own table, as the
    export writes it)."""
    sql(broker, "DELETE FROM export_watermarks WHERE name = 'reconcile-export'")
    sql(
        broker,
        "INSERT INTO export_watermarks (name, last_message_id, exported_until, updated_at) "
        "VALUES ('reconcile-export', 0, :until, 0)",
        until=until,
    )


async def test_deliveries_the_export_has_not_read_stay(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "g", "t")
    await send(broker, "t", [f"m{i}" for i in range(4)])
    await asyncio.sleep(0.01)  # delivered after they were stored
    await ack(broker, "g", await receive(broker, "g", "c1", 4))
    policy = replace(POLICY, wait_for_export=True)

    async def purge() -> PurgeReport:
        return await purger(broker, 49, policy).purge()

    never = await purge()  # the export never ran
    assert (never.purged["deliveries"], never.purged["messages"]) == (0, 0)
    assert never.export_held

    # Exported up to the messages, not up to their deliveries: the messages go, not these.
    ((last_stored,),) = sql(broker, "SELECT max(stored_at) FROM messages WHERE topic = 't'")
    ((first_delivered,),) = sql(broker, "SELECT min(delivered_at) FROM deliveries")
    assert last_stored < first_delivered
    watermark(broker, int(last_stored) + 1)
    report = await purge()
    assert (report.purged["deliveries"], report.purged["messages"]) == (0, 4)
    assert sql(broker, "SELECT count(*) FROM deliveries")[0][0] == 4

    watermark(broker, now_ms() + HOUR)
    assert (await purge()).purged["deliveries"] == 4
    assert sql(broker, "SELECT count(*) FROM deliveries")[0][0] == 0


async def test_transactions_the_export_has_not_read_stay(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    response = await broker.client.post(
        "/v1/transactions", json={"topic": "t", "producer_group": "pg", "body": "x"}
    )
    assert response.status_code == 201, response.text
    txid = response.json()["transaction_id"]
    response = await broker.client.post(
        f"/v1/transactions/{txid}/commit", json={"producer_group": "pg"}
    )
    assert response.status_code == 200, response.text
    policy = replace(POLICY, wait_for_export=True)
    halves = "SELECT count(*) FROM messages WHERE topic LIKE 'RMQ_SYS_TRANS_%'"

    never = await purger(broker, 49, policy).purge()
    assert never.purged["transactions"] == 0

    ((created, resolved),) = sql(broker, "SELECT created_at, resolved_at FROM transactions")
    watermark(broker, int(created))  # read up to just before it
    report = await purger(broker, 49, policy).purge()
    assert report.purged["transactions"] == 0
    assert sql(broker, halves)[0][0] == 2  # its half and op record stay with it
    assert (await broker.client.get(f"/v1/transactions/{txid}")).status_code == 200

    # Read past it and its resolution (its op record is stored at resolved_at): whether a
    # watermark between the two holds it is the export's rule (tests/acceptance/spark_reconcile), not
    # pinned here.
    watermark(broker, int(resolved) + 1)
    report = await purger(broker, 49, policy).purge()
    assert report.purged["transactions"] == 1
    assert sql(broker, halves)[0][0] == 0
    response = await broker.client.get(f"/v1/transactions/{txid}")
    assert response.json()["error"]["code"] == "TRANSACTION_EXPIRED"
