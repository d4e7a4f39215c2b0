"""A purge that expires a position and an ack that lands between its read and its update.

On PostgreSQL another broker's ack can commit between the purge's read of a group's committed
offset and its update of it (READ COMMITTED).  The update is a compare-and-set on the offset
read: it never moves the position back below what the ack passed, and counts as expired only
what it moved past itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, event, text

from broker_service.domain.clock import now_ms
from broker_service.store.sqltx import SqlTx
from tests.integration.broker_service.store.test_retention import consume, send, sql, subscribe
from tests.support import BrokerApp

POSITION = (
    "SELECT committed_offset, expired FROM consumer_offsets "
    "WHERE consumer_group = 'g' AND topic = 't'"
)
ACK = (
    "UPDATE consumer_offsets SET committed_offset = {to}, pulled_offset = 10 "
    "WHERE consumer_group = 'g' AND topic = 't'"
)


@pytest.fixture
async def broker(migrated_url: str) -> AsyncIterator[BrokerApp]:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, retention_wait_for_export=False
    ) as app:
        await app.topic("t", queues=1)
        await subscribe(app, "g", "t")
        await send(app, "t", [f"m{i}" for i in range(10)])
        await consume(app, "g", 10, ack=2)  # committed offset 2; 2-9 in flight
        yield app


@pytest.fixture
def engine(broker: BrokerApp) -> Iterator[Engine]:
    engine = create_engine(broker.settings.database_url)
    try:
        yield engine
    finally:
        engine.dispose()


def ack_before_the_update(conn: Connection, to: int) -> None:
    """Just before the purge's first update of the position, its offset moves to ``to`` in the
    same transaction: what an ack committed in between looks like to the update."""
    fired: list[bool] = []

    def hook(_conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if not fired and statement.lstrip().upper().startswith("UPDATE CONSUMER_OFFSETS"):
            fired.append(True)
            cursor.execute(ACK.format(to=to))

    event.listen(conn, "before_cursor_execute", hook)


@pytest.mark.parametrize(
    ("acked_to", "moved", "position"),
    [
        (8, 0, (8, 0)),  # the ack passed the purge's end: the position stays where it is
        (4, 2, (6, 2)),  # the ack passed 2-3: only 4-5 are expired
    ],
)
def test_the_update_is_conditional_on_the_offset_read(
    broker: BrokerApp,
    engine: Engine,
    acked_to: int,
    moved: int,
    position: tuple[int, int],
) -> None:
    with engine.begin() as conn:
        ack_before_the_update(conn, acked_to)
        n = SqlTx(conn).expire_position("g", "", "t", 0, 6, now_ms())
    assert n == moved
    assert tuple(sql(broker, POSITION)[0]) == position


@pytest.mark.parametrize(
    ("acked_to", "moved", "position"),
    [(8, 0, (8, 0)), (4, 2, (6, 2))],
)
async def test_an_ack_committed_by_another_connection_between_read_and_update(
    pg_url: str,
    acked_to: int,
    moved: int,
    position: tuple[int, int],
) -> None:
    """PostgreSQL: the ack's transaction holds the row; the purge (the broker's writer) reads the
    old offset and waits at its update; the ack commits; the purge goes on."""
    from broker_service.store import migrate

    migrate.upgrade(pg_url)
    async with BrokerApp.start(
        database_url=pg_url, scheduler=False, retention_wait_for_export=False
    ) as broker:
        await broker.topic("t", queues=1)
        await subscribe(broker, "g", "t")
        await send(broker, "t", [f"m{i}" for i in range(10)])
        await consume(broker, "g", 10, ack=2)
        engine = create_engine(pg_url)
        try:
            with engine.connect() as acker, engine.connect() as watcher:
                acker.begin()
                acker.execute(text(ACK.format(to=acked_to)))
                ack_pid = acker.execute(text("SELECT pg_backend_pid()")).scalar_one()
                store = broker.state.retention.store
                purge = asyncio.create_task(
                    store.write(lambda tx: tx.expire_position("g", "", "t", 0, 6, now_ms()))
                )
                waiting = text(
                    "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
                )
                for _ in range(200):  # until the purge waits for the ack's row lock (10 s)
                    if watcher.execute(waiting, {"pid": ack_pid}).scalar_one():
                        break
                    await asyncio.sleep(0.05)
                else:
                    pytest.fail("the purge never waited for the ack")
                assert not purge.done()
                acker.commit()
                n = await asyncio.wait_for(purge, 10)
        finally:
            engine.dispose()
        assert n == moved
        assert tuple(sql(broker, POSITION)[0]) == position
