"""PostgreSQL: consumer units run on the claims pools, and each commits as durably as it must --
a receive's lease without waiting for the WAL, an ack as the ``flush`` setting says."""

from __future__ import annotations

import pytest

from broker_service.settings import BrokerSettings, Flush
from broker_service.store import migrate
from broker_service.store.concurrent import ConcurrentUnits
from broker_service.store.sql_store import SqlStore
from broker_service.store.sqltx import SqlTx


def _synchronous_commit(tx: SqlTx) -> str:
    return str(tx.conn.exec_driver_sql("SHOW synchronous_commit").scalar())


@pytest.mark.parametrize(("flush", "ack_commits"), [(Flush.SYNC, "on"), (Flush.ASYNC, "off")])
async def test_leases_commit_asynchronously_and_acks_as_flush_says(
    pg_url: str, flush: Flush, ack_commits: str
) -> None:
    migrate.upgrade(pg_url)
    store = SqlStore(BrokerSettings(database_url=pg_url, flush=flush))
    runner = ConcurrentUnits(
        store.claims_engine(),
        store.claims_engine(durable=flush is Flush.SYNC),
        ready=lambda: True,
    )
    try:
        assert await runner.run_lease(_synchronous_commit) == "off"
        assert await runner.run(_synchronous_commit) == ack_commits
        # Twice each: a pooled connection keeps what its pool's sessions start with.
        assert await runner.run_lease(_synchronous_commit) == "off"
        assert await runner.run(_synchronous_commit) == ack_commits
    finally:
        store.close()
