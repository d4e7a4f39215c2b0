"""PostgreSQL: acks racing on one queue's progress row still leave the group's committed offset at
the oldest open offset -- a group with nothing in flight shows no lag.

Two acks of one queue on two connections (two brokers, or two units of one broker's claims pool):
each marks its deliveries ACKED, then moves the queue's committed offset to the oldest delivery
still open.  An ack that computes that while the other's ACKED rows are not yet committed cannot
see them (READ COMMITTED), so it stops the offset at the other's deliveries; the other, finding
the progress row locked, must not simply leave it (the offset stayed behind, lag 3-5 with nothing
in flight, until the queue's next receive).  The interleaving is forced with two units of the
store's own claims runner, each the two steps of the domain's ack, paused in between.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from broker_service.domain.consumers.model import DeliveryState
from broker_service.store import migrate
from broker_service.store.sqltx import SqlTx
from tests.support import BrokerApp

_WAIT = 5.0  # seconds a unit waits for the other's step, at most


async def _post(broker: BrokerApp, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await broker.client.post(path, json=body)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, Any] = response.json()
    return answer


async def _receive(broker: BrokerApp, client_id: str, count: int) -> list[str]:
    answer = await _post(
        broker,
        "/v1/consumer-groups/g/receive",
        {"client_id": client_id, "max_messages": count, "invisible_seconds": 60},
    )
    return [m["receipt_handle"] for m in answer["messages"]]


async def test_two_acks_racing_on_one_queue_leave_no_lag(pg_url: str) -> None:
    migrate.upgrade(pg_url)
    async with BrokerApp.start(database_url=pg_url) as broker:
        await _post(broker, "/v1/topics", {"name": "t", "queues": 1})
        await _post(broker, "/v1/consumer-groups", {"name": "g", "consume_from": "FIRST_OFFSET"})
        await _post(broker, "/v1/consumer-groups/g/subscriptions", {"topic": "t"})
        batch = [{"body": f"m{i}", "msg_id": f"m{i}"} for i in range(8)]
        await _post(broker, "/v1/topics/t/messages:batch", {"messages": batch})
        first = await _receive(broker, "c1", 4)  # offsets 0-3
        second = await _receive(broker, "c2", 4)  # offsets 4-7
        assert len(first) == len(second) == 4

        runner = broker.state.store.claims_runner()
        assert runner is not None, "PostgreSQL runs consumer units on the claims pools"
        key = [("g", "t", 0, "")]
        second_marked, first_advanced, second_advanced = (threading.Event() for _ in range(3))

        def ack_second(tx: SqlTx) -> None:
            """Marks offsets 4-7 ACKED first, and moves the offset while the first ack, which
            could not see them, holds the progress row."""
            now = int(time.time() * 1000)
            assert len(tx.finish_deliveries("g", second, DeliveryState.ACKED, now)) == 4
            second_marked.set()
            assert first_advanced.wait(_WAIT)
            tx.advance_committed(key, now)
            second_advanced.set()

        def ack_first(tx: SqlTx) -> None:
            """Marks offsets 0-3 ACKED and moves the offset before the second ack commits: it
            sees 4-7 still in flight, so it stops at 4."""
            assert second_marked.wait(_WAIT)
            now = int(time.time() * 1000)
            assert len(tx.finish_deliveries("g", first, DeliveryState.ACKED, now)) == 4
            tx.advance_committed(key, now)
            first_advanced.set()
            second_advanced.wait(1.0)  # a second ack that waits for this row waits for this commit

        await asyncio.gather(runner.run(ack_second), runner.run(ack_first))

        view = (await broker.client.get("/v1/consumer-groups/g")).json()
        assert view["in_flight"] == 0
        assert view["lag"] == 0, view
