"""PostgreSQL: a purge round vacuums every table the purge and the nonces' expiry delete from
(issue 29, item 7) -- not only ``messages`` and ``purged_ids`` -- so that with autovacuum off or
behind, the space of the rows retention deletes is reused instead of the database growing.

The real broker in process on the machine's PostgreSQL, in a database of the test's own (a schema
would not do: another test's open snapshot in the same database keeps the dead rows a VACUUM may
not remove yet, and the suite runs in parallel workers): messages with
keys sent, received and acked (``messages``, ``message_keys``, ``deliveries``), halves committed
(``transactions``), clients' trace events (``trace_events``), signed requests' nonces past their
window expired as the ACL's expiry does (``acl_nonces``); then purge rounds with a clock days
ahead (the second one purges the first one's ``purged_ids``).  Each table's dead tuples are
counted with ``pgstattuple`` (installed in the test's database, dropped with it): the statistics'
``n_dead_tup`` may still receive the purge's own deletes after the VACUUM that removed them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import httpx

from broker_service.domain.clock import now_ms
from broker_service.store import migrate
from tests.integration.broker_service.store.test_retention import POLICY, purger, sql
from tests.support import BrokerApp

# What the purge deletes from, and the nonces' expiry.
RECLAIMED = (
    "messages",
    "message_keys",
    "transactions",
    "deliveries",
    "trace_events",
    "purged_ids",
    "acl_nonces",
)
N = 1_200  # per table: over the store's least count of dead rows worth a VACUUM (1,000)
BATCH = 600


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    assert response.status_code in (200, 201), response.text[:500]
    answer: dict[str, Any] = response.json()
    return answer


async def _fill(broker: BrokerApp) -> None:
    client = broker.client
    await broker.topic("t", queues=1)
    await _post(client, "/v1/consumer-groups", {"name": "g", "consume_from": "FIRST_OFFSET"})
    await _post(client, "/v1/consumer-groups/g/subscriptions", {"topic": "t"})
    for start in range(0, N, BATCH):
        messages = [
            {"body": str(i), "msg_id": f"m{i}", "keys": [f"k{i}"]}
            for i in range(start, start + BATCH)
        ]
        await _post(client, "/v1/topics/t/messages:batch", {"messages": messages})
    acked = 0
    while acked < N:
        got = await _post(client, "/v1/consumer-groups/g/receive",
                          {"client_id": "c1", "max_messages": 32, "wait_seconds": 0})  # fmt: skip
        handles = [m["receipt_handle"] for m in got["messages"]]
        assert handles, f"only {acked} of {N} received"
        await _post(client, "/v1/consumer-groups/g/ack", {"receipt_handles": handles})
        acked += len(handles)
    for _ in range(0, N, BATCH):
        halves = [{"topic": "t", "producer_group": "p", "body": str(i)} for i in range(BATCH)]
        sent = await _post(client, "/v1/transactions:batch", {"halves": halves})
        decisions = [{"transaction_id": r["result"]["transaction_id"], "decision": "COMMIT",
                      "producer_group": "p"} for r in sent["results"]]  # fmt: skip
        await _post(client, "/v1/transactions/decisions:batch", {"decisions": decisions})
    at = now_ms()
    for start in range(0, N, BATCH):
        events = [{"msg_id": f"m{i}", "type": "PUB", "topic": "t", "group": "p", "client_id": "c1",
                   "at": at, "cost_ms": 1, "status": "OK"} for i in range(start, start + BATCH)]  # fmt: skip
        traced = await _post(client, "/v1/trace", {"events": events})
        assert traced["recorded"] == BATCH, traced


async def test_purge_rounds_vacuum_every_table_the_purge_and_the_nonce_expiry_delete_from(
    pg_database_url: str,
) -> None:
    migrate.upgrade(pg_database_url)
    async with BrokerApp.start(
        database_url=pg_database_url, scheduler=False, retention_wait_for_export=False
    ) as broker:
        sql(broker, "CREATE EXTENSION IF NOT EXISTS pgstattuple")
        for table in RECLAIMED:
            # Autovacuum off (the case the purge's VACUUM is for), and no autovacuum ANALYZE
            # whose snapshot would keep the purge's dead rows from the VACUUM under test.
            sql(broker, f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        await _fill(broker)
        store = broker.state.retention.store
        signed_long_ago = [("bob-bank-key", f"nonce-{i}", 1_000 + i) for i in range(N)]
        await store.write(lambda tx: tx.remember_nonces(signed_long_ago))
        expired = await store.write(lambda tx: tx.purge_nonces(10_000))  # the ACL's expiry
        assert expired == N
        policy = replace(POLICY, batch=5_000)
        first = await purger(broker, 49, policy).purge()
        second = await purger(broker, 98, policy).purge()  # the first round's purged-id records
        purged = {t: first.purged.get(t, 0) + second.purged.get(t, 0) for t in RECLAIMED}
        for table in RECLAIMED:
            if table != "acl_nonces":
                assert purged[table] >= N, (table, purged)
        # Before: messages and purged_ids only (and only past 10,000 purged rows).  A table
        # whose dead rows the purge did not count itself (acl_nonces: the ACL's expiry) is seen
        # through PostgreSQL's statistics, which its backends report within a second or so: a
        # later round vacuums it (here, the store's reclaim asked again for a bounded while).
        reclaimed = first.reclaimed + second.reclaimed
        deadline = time.monotonic() + 30
        while set(reclaimed) != set(RECLAIMED) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            reclaimed += await store.reclaim({})
        assert sorted(reclaimed) == sorted(RECLAIMED)
        for table in RECLAIMED:
            ((dead, vacuumed),) = sql(
                broker,
                f"SELECT (pgstattuple('{table}')).dead_tuple_count, last_vacuum IS NOT NULL "
                "FROM pg_stat_user_tables "
                f"WHERE schemaname = current_schema() AND relname = '{table}'",
            )
            assert vacuumed, table
            assert dead == 0, (table, dead, _snapshots_held(broker))
        # A round right after finds nothing to vacuum: each table at most once in a while.
        assert (await purger(broker, 98, policy).purge()).reclaimed == []


def _snapshots_held(broker: BrokerApp) -> list[Any]:
    """What could have kept dead rows from a VACUUM: the sessions of this database (or of none)
    with an open snapshot, for the failure's message."""
    return sql(
        broker,
        "SELECT pid, datname, backend_type, state, backend_xmin, left(query, 80) "
        "FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid() "
        "AND (datname = current_database() OR datname IS NULL)",
    )
