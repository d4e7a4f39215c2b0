"""Retention of delayed messages on both stores: those released into their topic go, in bounded
batches, however many still wait at the head of their schedule queue.

Messages with an explicit ``deliver_at`` share one schedule queue and are released in the order
of their times, not of their offsets: a head of messages due in days can sit before thousands
already released.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from broker_service.domain.clock import now_ms
from tests.integration.broker_service.store.test_retention import HOUR, _rfc3339, purger, sql
from tests.support import BrokerApp

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
# How far ahead the messages to release are due: far enough that, on a loaded machine, the send
# still reaches the broker before that time (a message sent already due is not parked at all).
SOON_MS = 1_500


@pytest.fixture
async def broker(migrated_url: str) -> AsyncIterator[BrokerApp]:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, retention_wait_for_export=False
    ) as app:
        yield app


async def send_at(broker: BrokerApp, ids: list[str], at: int) -> None:
    for i in range(0, len(ids), 1000):
        body = {
            "messages": [
                {"body": m, "msg_id": m, "deliver_at": _rfc3339(at)} for m in ids[i : i + 1000]
            ]
        }
        response = await broker.client.post("/v1/topics/t/messages:batch", json=body)
        assert response.status_code == 201, response.text


def schedule_rows(broker: BrokerApp) -> dict[str, int]:
    """The schedule queue's rows: waiting and released."""
    rows = sql(
        broker,
        "SELECT released_at IS NULL, count(*) FROM messages WHERE topic = :t "
        "GROUP BY released_at IS NULL",
        t=SCHEDULE,
    )
    return {("waiting" if bool(r[0]) else "released"): int(r[1]) for r in rows}


async def park_and_release(broker: BrokerApp, ids: list[str]) -> int:
    """Sends ``ids`` due shortly, checks they were parked in the schedule queue, waits until they
    are due and releases them: how many the release moved into their topic."""
    due = now_ms() + SOON_MS
    waiting = schedule_rows(broker).get("waiting", 0)
    await send_at(broker, ids, due)
    assert schedule_rows(broker).get("waiting", 0) == waiting + len(ids), "not parked"
    await asyncio.sleep(max(0, due - now_ms()) / 1000 + 0.05)
    return (await broker.state.messages.release_due(100)).released


@pytest.mark.parametrize("waiting", [5_001, 12_000])
async def test_released_messages_behind_a_long_waiting_head_go(
    broker: BrokerApp, waiting: int
) -> None:
    await broker.topic("t", queues=1)
    await send_at(broker, [f"w{i}" for i in range(waiting)], now_ms() + 60 * HOUR)
    assert await park_and_release(broker, [f"r{i}" for i in range(30)]) == 30
    assert schedule_rows(broker) == {"waiting": waiting, "released": 30}
    ((queue_id, head),) = sql(
        broker, "SELECT queue_id, min_offset FROM queues WHERE topic = :t AND next_offset > 0",
        t=SCHEDULE,
    )  # fmt: skip

    dry = await purger(broker, 49).purge(dry_run=True)
    report = await purger(broker, 49).purge()  # batches of 7 rows

    assert dry.purged["messages"] == report.purged["messages"] == 60  # 30 parked, 30 in t
    assert report.complete
    assert schedule_rows(broker) == {"waiting": waiting}
    # The head still waits: the queue keeps its offsets from the oldest waiting message on.
    ((after,),) = sql(
        broker, "SELECT min_offset FROM queues WHERE topic = :t AND queue_id = :q",
        t=SCHEDULE, q=queue_id,
    )  # fmt: skip
    assert after == head == 0
    released = await broker.client.get("/v1/messages/r3")
    assert released.json()["error"]["code"] == "MESSAGE_EXPIRED"
    # The waiting messages are still released when their time comes.
    waits = await broker.client.get(f"/v1/messages/w{waiting - 1}")
    assert waits.status_code == 200, waits.text


async def test_a_round_stops_at_its_budget_and_the_next_goes_on(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await send_at(broker, [f"w{i}" for i in range(50)], now_ms() + 60 * HOUR)
    assert await park_and_release(broker, [f"r{i}" for i in range(20)]) == 20
    t_copies = sql(broker, "SELECT count(*) FROM messages WHERE topic = 't'")[0][0]
    assert t_copies == 20

    first = await purger(broker, 49).purge(max_rows=25)
    assert first.purged["messages"] == 25  # the 20 parked, then 5 of their copies in t
    assert not first.complete
    while True:
        more = await purger(broker, 49).purge()
        if more.complete and not more.total:
            break
    assert schedule_rows(broker) == {"waiting": 50}
    assert sql(broker, "SELECT count(*) FROM messages WHERE topic = 't'")[0][0] == 0
