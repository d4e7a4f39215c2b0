"""Retention on both stores: the purge removes what is done and never what is still needed.

Each test runs the real broker (in process) on a real store, sends and consumes over its REST
API, and purges with a :class:`RetentionService` whose clock runs days ahead, so that what was
just stored counts as old.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from broker_service.domain.clock import now_ms
from broker_service.domain.config import RetentionPolicy
from broker_service.domain.retention.model import PurgeReport
from broker_service.domain.retention.service import LeaseHeld, Pace, RetentionService
from tests.support import BrokerApp

HOUR = 3_600_000
POLICY = RetentionPolicy(retention_ms=48 * HOUR, wait_for_export=False, batch=7)


@pytest.fixture
async def broker(migrated_url: str) -> AsyncIterator[BrokerApp]:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, retention_wait_for_export=False
    ) as app:
        yield app


def purger(
    broker: BrokerApp, hours_ahead: float, policy: RetentionPolicy = POLICY
) -> RetentionService:
    """A purge as a broker would run it ``hours_ahead`` from now."""
    ahead = int(hours_ahead * HOUR)
    store = broker.state.retention.store
    return RetentionService(store, policy, lambda: now_ms() + ahead, upkeep=store)


def sql(broker: BrokerApp, query: str, **params: Any) -> list[Any]:
    engine = create_engine(broker.settings.database_url)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(query), params)
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


async def send(broker: BrokerApp, topic: str, ids: list[str], **fields: Any) -> None:
    body = {"messages": [{"body": i, "msg_id": i, **fields} for i in ids]}
    response = await broker.client.post(f"/v1/topics/{topic}/messages:batch", json=body)
    assert response.status_code == 201, response.text


async def subscribe(broker: BrokerApp, group: str, topic: str, **config: Any) -> None:
    config = {"consume_from": "FIRST_OFFSET", **config}
    response = await broker.client.post("/v1/consumer-groups", json={"name": group, **config})
    assert response.status_code in (200, 201), response.text
    response = await broker.client.post(
        f"/v1/consumer-groups/{group}/subscriptions", json={"topic": topic}
    )
    assert response.status_code in (200, 201), response.text


async def consume(broker: BrokerApp, group: str, n: int, ack: int | None = None) -> list[str]:
    """Receive ``n`` messages and ack the first ``ack`` of them (all by default)."""
    got: list[dict[str, Any]] = []
    for _ in range(20):
        response = await broker.client.post(
            f"/v1/consumer-groups/{group}/receive",
            json={"client_id": "c1", "max_messages": n - len(got), "wait_seconds": 0},
        )
        assert response.status_code == 200, response.text
        got += response.json()["messages"]
        if len(got) >= n:
            break
    assert len(got) == n
    got.sort(key=lambda m: m["queue_offset"])
    handles = [m["receipt_handle"] for m in got[: n if ack is None else ack]]
    if handles:
        response = await broker.client.post(
            f"/v1/consumer-groups/{group}/ack", json={"receipt_handles": handles}
        )
        assert response.status_code == 200, response.text
    return [m["msg_id"] for m in got]


async def queue_offsets(broker: BrokerApp, topic: str) -> tuple[int, int]:
    response = await broker.client.get(f"/v1/topics/{topic}")
    assert response.status_code == 200, response.text
    (queue,) = response.json()["queue_offsets"]
    return queue["min_offset"], queue["max_offset"]


async def error_code(broker: BrokerApp, path: str) -> str:
    response = await broker.client.get(path)
    assert response.status_code == 404, response.text
    code: str = response.json()["error"]["code"]
    return code


async def test_consumed_messages_older_than_retention_go_and_answer_expired(
    broker: BrokerApp,
) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "g", "t")
    ids = [f"m{i}" for i in range(20)]
    await send(broker, "t", ids, keys=["k"])
    await consume(broker, "g", 20)

    young = await purger(broker, 1).purge()
    assert young.purged["messages"] == 0  # an hour on: nothing is old yet
    report = await purger(broker, 49).purge()

    assert report.purged["messages"] == 20
    assert report.purged["message_keys"] == 20
    assert await queue_offsets(broker, "t") == (20, 20)
    assert await error_code(broker, "/v1/messages/m3") == "MESSAGE_EXPIRED"
    assert await error_code(broker, "/v1/messages/never-sent") == "MESSAGE_NOT_FOUND"
    found = await broker.client.get("/v1/messages", params={"topic": "t", "key": "k"})
    assert found.status_code == 200
    assert found.json()["messages"] == []
    # A new message after the purge is stored and consumed as before.
    await send(broker, "t", ["after"])
    assert await consume(broker, "g", 1) == ["after"]


async def test_a_group_keeps_what_it_has_not_acked(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "g", "t")
    await subscribe(broker, "idle", "t")  # FIRST_OFFSET, never received: holds everything
    await send(broker, "t", [f"m{i}" for i in range(10)])
    await consume(broker, "g", 5, ack=3)

    report = await purger(broker, 49).purge()
    assert report.purged["messages"] == 0
    assert {(h.group, h.offset) for h in report.held} == {("g", 3), ("idle", 0)}

    sql(broker, "DELETE FROM subscriptions WHERE consumer_group = 'idle'")
    report = await purger(broker, 49).purge()
    assert report.purged["messages"] == 3  # up to g's oldest unacked message
    assert await queue_offsets(broker, "t") == (3, 10)
    # The unacked messages are still delivered after their invisibility (here: at once, acked).
    view = (await broker.client.get("/v1/consumer-groups/g")).json()
    assert view["queues"][0]["committed_offset"] == 3
    assert view["queues"][0]["expired"] == 0


async def test_past_the_hard_limit_an_unconsumed_message_expires_and_is_counted(
    broker: BrokerApp,
) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "slow", "t")
    await send(broker, "t", [f"m{i}" for i in range(12)])
    await consume(broker, "slow", 4, ack=2)  # two acked, two in flight, eight never received

    policy = replace(POLICY, hard_limit_ms=72 * HOUR)
    kept = await purger(broker, 60, policy).purge()  # past the retention, not the hard limit
    assert kept.purged["messages"] == 2
    assert kept.expired == []
    report = await purger(broker, 73, policy).purge()

    assert report.purged["messages"] == 10
    # Expired batch by batch, each counted and logged; together the ten never received or acked.
    assert {e.group for e in report.expired} == {"slow"}
    assert sum(e.count for e in report.expired) == 10
    assert (report.expired[0].from_offset, report.expired[-1].to_offset) == (2, 12)
    view = (await broker.client.get("/v1/consumer-groups/slow")).json()
    queue = next(q for q in view["queues"] if q["topic"] == "t")
    assert queue["expired"] == 10
    assert queue["committed_offset"] == 12
    assert queue["in_flight"] == 0
    await send(broker, "t", ["next"])
    assert await consume(broker, "slow", 1) == ["next"]


async def test_resolved_halves_go_prepared_and_discarded_ones_stay(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    txids: dict[str, str] = {}
    for name in ("committed", "rolled", "prepared", "discarded"):
        response = await broker.client.post(
            "/v1/transactions",
            json={"topic": "t", "producer_group": "pg", "body": name, "msg_id": name},
        )
        assert response.status_code == 201, response.text
        txids[name] = response.json()["transaction_id"]
    for name, action in (("committed", "commit"), ("rolled", "rollback")):
        response = await broker.client.post(
            f"/v1/transactions/{txids[name]}/{action}", json={"producer_group": "pg"}
        )
        assert response.status_code == 200, response.text
    sql(
        broker,
        "UPDATE transactions SET state = 'DISCARDED', next_check_at = NULL "
        "WHERE transaction_id = :t",
        t=txids["discarded"],
    )

    report = await purger(broker, 49).purge()

    assert report.purged["transactions"] == 2
    for name in ("committed", "rolled"):
        path = f"/v1/transactions/{txids[name]}"
        assert await error_code(broker, path) == "TRANSACTION_EXPIRED"
    for name, state in (("prepared", "PREPARED"), ("discarded", "DISCARDED")):
        response = await broker.client.get(f"/v1/transactions/{txids[name]}")
        assert response.status_code == 200
        assert response.json()["state"] == state
        (count,) = sql(
            broker,
            "SELECT count(*) FROM messages WHERE transaction_id = :t "
            "AND topic = 'RMQ_SYS_TRANS_HALF_TOPIC'",
            t=txids[name],
        )
        assert count[0] == 1  # the half the transaction still needs
    ops = sql(broker, "SELECT count(*) FROM messages WHERE topic = 'RMQ_SYS_TRANS_OP_HALF_TOPIC'")
    assert ops[0][0] == 0
    # The discarded half can still be committed by an operator, from its stored half.
    response = await broker.client.post(f"/v1/transactions/{txids['discarded']}/commit", json={})
    assert response.status_code == 200, response.text


async def test_nothing_the_export_has_not_read_goes(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await send(broker, "t", [f"m{i}" for i in range(5)])
    policy = replace(POLICY, wait_for_export=True)

    never = await purger(broker, 49, policy).purge()
    assert never.purged["messages"] == 0
    assert never.export_held

    sql(
        broker,
        "INSERT INTO export_watermarks (name, last_message_id, exported_until, updated_at) "
        "VALUES ('reconcile-export', 0, :until, 0)",
        until=now_ms() - HOUR,  # exported up to an hour ago: not these
    )
    assert (await purger(broker, 49, policy).purge()).purged["messages"] == 0
    sql(broker, "UPDATE export_watermarks SET exported_until = :until", until=now_ms() + HOUR)
    assert (await purger(broker, 49, policy).purge()).purged["messages"] == 5


async def test_a_delayed_message_still_waiting_stays(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await send(broker, "t", ["later"], deliver_at=_rfc3339(now_ms() + 60 * HOUR))
    report = await purger(broker, 49).purge()
    assert report.purged["messages"] == 0
    (row,) = sql(broker, "SELECT released_at FROM messages WHERE msg_id = 'later'")
    assert row[0] is None


async def test_a_dry_run_reports_and_deletes_nothing(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "g", "t")
    await send(broker, "t", [f"m{i}" for i in range(30)], keys=["a", "b"])
    await consume(broker, "g", 30)

    dry = await purger(broker, 49).purge(dry_run=True)
    assert dry.dry_run
    assert dry.purged["messages"] == 30
    assert dry.purged["message_keys"] == 60
    assert await queue_offsets(broker, "t") == (0, 30)
    done = await purger(broker, 49).purge()
    assert done.purged["messages"] == 30
    assert done.purged["message_keys"] == 60


async def test_one_broker_at_a_time_holds_the_purge(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await send(broker, "t", [f"m{i}" for i in range(10)])
    report = await purger(broker, 49, replace(POLICY, broker_id="a")).purge()
    assert report.purged["messages"] == 10
    await send(broker, "t", ["n1"])
    with pytest.raises(LeaseHeld):  # a's lease runs a minute past its last unit
        await purger(broker, 49, replace(POLICY, broker_id="b")).purge()
    assert await queue_offsets(broker, "t") == (10, 11)
    # Once a's lease has run out, b takes over.
    later = purger(broker, 49.05, replace(POLICY, broker_id="b"))
    assert (await later.purge()).purged["messages"] == 1


async def test_one_round_at_a_time_in_a_broker_and_a_lost_lease_keeps_what_was_done(
    broker: BrokerApp,
) -> None:
    await broker.topic("t", queues=1)
    await send(broker, "t", [f"m{i}" for i in range(30)])
    service = purger(broker, 49)  # batches of 7 rows, a pause between them
    first = asyncio.create_task(service.purge(pace=Pace(pause=0.2)))
    await asyncio.sleep(0.1)
    with pytest.raises(LeaseHeld):
        await service.purge()
    # Another broker takes the lease over (ours ran out): the round stops at its next unit.
    sql(broker, "UPDATE leases SET holder = 'other', until = :until", until=now_ms() + 100 * HOUR)
    report = await first

    assert 0 < report.purged["messages"] < 30
    assert not report.complete
    (left,) = sql(broker, "SELECT count(*) FROM messages WHERE topic = 't'")
    assert left[0] == 30 - report.purged["messages"]


async def test_two_brokers_on_one_postgresql_purge_once_beside_sends(pg_url: str) -> None:
    from broker_service.store import migrate

    migrate.upgrade(pg_url)
    settings = {"database_url": pg_url, "scheduler": False, "retention_wait_for_export": False}
    async with BrokerApp.start(**settings) as a, BrokerApp.start(**settings) as b:
        await a.topic("t", queues=2)
        await send(a, "t", [f"old{i}" for i in range(400)])
        ahead = 49 * HOUR
        services = [
            RetentionService(
                broker.state.retention.store,
                replace(POLICY, broker_id=name, batch=50),
                lambda: now_ms() + ahead,
            )
            for name, broker in (("a", a), ("b", b))
        ]

        async def sends() -> int:
            for i in range(20):
                await send(b, "t", [f"new{i}-{j}" for j in range(5)])
            return 100

        results = await asyncio.gather(
            services[0].purge(), services[1].purge(), sends(), return_exceptions=True
        )
        reports = [r for r in results[:2] if isinstance(r, PurgeReport)]
        refused = [r for r in results[:2] if isinstance(r, LeaseHeld)]
        # Every unit of a purge renews the lease: the broker that came second finds it held.
        assert len(reports) == 1, results
        assert len(refused) == 1, results
        purged = reports[0].purged["messages"]
        # Whatever was sent during the purge is newer than its cut, but the clock runs 49 h
        # ahead: some of it may be purged too.  No message is purged twice, none is lost
        # unpurged, and offsets stay dense.
        (left,) = sql(a, "SELECT count(*) FROM messages WHERE topic = 't'")
        assert purged + left[0] == 500
        rows = sql(
            a,
            "SELECT q.queue_id, q.min_offset, q.next_offset, count(m.id) FROM queues q "
            "LEFT JOIN messages m ON m.topic = q.topic AND m.queue_id = q.queue_id "
            "WHERE q.topic = 't' GROUP BY q.queue_id, q.min_offset, q.next_offset",
        )
        assert sum(r[2] for r in rows) == 500
        for _queue, low, high, count in rows:
            assert count == high - low


def _rfc3339(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")


async def test_sqlite_gives_the_space_of_purged_rows_back(sqlite_url: str) -> None:
    async with BrokerApp.start(
        database_url=sqlite_url, scheduler=False, retention_wait_for_export=False
    ) as broker:
        await broker.topic("t", queues=1)
        body = "x" * 4000
        for batch in range(10):
            ids = [f"b{batch}-{i}" for i in range(100)]
            response = await broker.client.post(
                "/v1/topics/t/messages:batch",
                json={"messages": [{"body": body, "msg_id": i} for i in ids]},
            )
            assert response.status_code == 201, response.text
        (pages,) = sql(broker, "PRAGMA page_count")
        (mode,) = sql(broker, "PRAGMA auto_vacuum")
        assert mode[0] == 2  # incremental: a new store file is made so

        report = await purger(broker, 49, replace(POLICY, batch=1000)).purge()

        assert report.purged["messages"] == 1000
        (after,) = sql(broker, "PRAGMA page_count")
        (free,) = sql(broker, "PRAGMA freelist_count")
        assert after[0] < pages[0] / 2  # the file shrank: ~4 MB of bodies went
        assert free[0] * 4 < after[0]  # some kept free for new rows, less than a quarter


async def test_finished_deliveries_go_and_open_ones_stay(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "g", "t")
    await send(broker, "t", [f"m{i}" for i in range(6)])
    await consume(broker, "g", 6, ack=4)  # four acked, two in flight

    report = await purger(broker, 49).purge()

    assert report.purged["deliveries"] == 4
    states = sql(broker, "SELECT state, count(*) FROM deliveries GROUP BY state")
    assert dict(states) == {"INFLIGHT": 2}
    assert await queue_offsets(broker, "t") == (4, 6)  # the in-flight messages are kept


async def test_the_scheduler_purges_on_its_own(migrated_url: str) -> None:
    async with BrokerApp.start(
        database_url=migrated_url,
        retention_wait_for_export=False,
        retention_hours=0.0002,  # 0.72 s
        purge_interval_seconds=0.2,
    ) as broker:
        await broker.topic("t", queues=1)
        await subscribe(broker, "g", "t")
        await send(broker, "t", [f"m{i}" for i in range(5)])
        await consume(broker, "g", 5)
        line = 'halfmq_retention_purged_rows_total{table="messages"} 5.0'
        for _ in range(300):  # 30 s at most: the round is counted once it ends
            metrics = (await broker.client.get("/metrics")).text
            if line in metrics:
                break
            await asyncio.sleep(0.1)
        assert await queue_offsets(broker, "t") == (5, 5)
        assert line in metrics


async def test_a_purge_that_falls_behind_goes_on_at_once_with_more_of_the_writer(
    migrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from broker_service.schedulers.retention import RetentionScheduler

    async with BrokerApp.start(
        database_url=migrated_url,
        scheduler=False,
        retention_wait_for_export=False,
        retention_hours=0.0001,  # 0.36 s
        purge_batch=10,
    ) as broker:
        await broker.topic("t", queues=1)
        await send(broker, "t", [f"m{i}" for i in range(100)])  # nobody subscribes: all may go
        # Rounds of three units, 5 s apart unless one is cut short.
        scheduler = RetentionScheduler(
            broker.state.retention,
            broker.state.metrics,
            interval_seconds=5,
            pause_seconds=0.002,
            share=0.25,
            max_rows=30,
        )
        assert scheduler.pace.most == 5  # never a pause past the next round's turn
        caplog.set_level("INFO", logger="halfmq.retention")
        await asyncio.sleep(0.5)
        first = await scheduler.run_round()
        assert first is not None
        assert first.purged["messages"] == 30
        assert not first.complete
        scheduler.adapt(behind=True)
        assert scheduler.pace.share == 0.5
        assert "falls behind" in caplog.text
        scheduler.adapt(behind=True)
        scheduler.adapt(behind=True)
        assert scheduler.pace.share == 1.0  # all of the writer, no more
        scheduler.adapt(behind=False)
        assert scheduler.pace.share == 0.25
        assert "caught up" in caplog.text
        # The loop: its first round 5 s on, then the three more the 70 messages left need back
        # to back (5 s apart they would take 20 s).
        started = asyncio.get_running_loop().time()
        scheduler.start()
        try:
            for _ in range(150):  # 15 s at most
                if await queue_offsets(broker, "t") == (100, 100):
                    break
                await asyncio.sleep(0.1)
            took = asyncio.get_running_loop().time() - started
            for _ in range(50):  # the last round's end: its compaction, then its pace
                if scheduler.pace.share == 0.25:
                    break
                await asyncio.sleep(0.1)
        finally:
            await scheduler.stop()
        assert await queue_offsets(broker, "t") == (100, 100)
        assert took < 9, took
        assert scheduler.pace.share == 0.25  # the last round finished: back to the set share


async def test_postgresql_vacuums_what_a_purge_left_dead(pg_url: str) -> None:
    from broker_service.store import migrate

    migrate.upgrade(pg_url)
    async with BrokerApp.start(
        database_url=pg_url, scheduler=False, retention_wait_for_export=False
    ) as broker:
        await broker.topic("t", queues=1)
        for batch in range(12):
            await send(broker, "t", [f"b{batch}-{i}" for i in range(1000)])
        store = broker.state.retention.store
        report = await purger(broker, 49, replace(POLICY, batch=5000)).purge()
        assert report.purged["messages"] == 12_000
        # The store vacuumed the table (autovacuum may be off, and would wait for a fifth of
        # it), not the tables the purge barely touched.
        assert report.reclaimed == ["messages"]
        assert await store.reclaim({"messages": 10}) == []  # too few dead rows: not again
        (dead,) = sql(
            broker,
            "SELECT n_dead_tup FROM pg_stat_user_tables "
            "WHERE schemaname = current_schema() AND relname = 'messages'",
        )
        assert dead[0] < 1000


async def test_a_dry_run_counts_what_transactions_take_with_them(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    for name, action in (("c1", "commit"), ("c2", "commit"), ("r1", "rollback"), ("p1", None)):
        response = await broker.client.post(
            "/v1/transactions",
            json={"topic": "t", "producer_group": "pg", "body": name, "keys": ["a", "b"]},
        )
        assert response.status_code == 201, response.text
        if action is not None:
            txid = response.json()["transaction_id"]
            response = await broker.client.post(
                f"/v1/transactions/{txid}/{action}", json={"producer_group": "pg"}
            )
            assert response.status_code == 200, response.text
    halves = (
        "SELECT count(*) FROM messages WHERE topic LIKE 'RMQ_SYS_TRANS_%' "
        "AND transaction_id IN (SELECT transaction_id FROM transactions WHERE state <> 'PREPARED')"
    )
    (theirs,) = sql(broker, halves)
    assert theirs[0] == 6  # three halves, three op records

    dry = await purger(broker, 49).purge(dry_run=True)
    done = await purger(broker, 49).purge()

    assert dry.purged == done.purged
    assert done.purged["transactions"] == 3
    # Three halves and op records, and the two committed messages in t.
    assert done.purged["messages"] == 6 + 2
    # The keys of the halves, and of the committed messages; the op records have none.
    assert done.purged["message_keys"] == 2 * 3 + 2 * 2
    ((left,),) = sql(broker, "SELECT count(*) FROM message_keys")
    assert left == 2  # the prepared half's
