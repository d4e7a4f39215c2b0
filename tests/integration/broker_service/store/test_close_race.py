"""Closing the store while a read is on its way to a worker thread: the read is refused, and no
connection is opened on an engine already disposed (a fresh pool nothing closes, whose
connection the garbage collector would find open later)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from broker_service.domain.errors import NotReady
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from broker_service.store.sql_store import SqlStore
from broker_service.store.sqltx import SqlTx


def _one(tx: SqlTx) -> int:
    return int(tx.conn.execute(text("SELECT 1")).scalar_one())


async def test_a_read_that_starts_after_close_opens_no_connection(pg_url: str) -> None:
    migrate.upgrade(pg_url)
    store = SqlStore(BrokerSettings(database_url=pg_url))
    store.open()
    assert await store.read(_one) == 1  # the guard passes while open
    store.close()
    # What a worker thread runs when the close came between the guard and the thread's start.
    with pytest.raises(NotReady, match="shutting down"):
        store._read(_one)
    pool = store.readers.pool
    assert isinstance(pool, QueuePool)
    assert pool.checkedin() == 0
    assert pool.checkedout() == 0
    probe = await store.ping()
    assert not probe.ready
    assert pool.checkedin() == 0
