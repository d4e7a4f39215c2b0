"""A group commit whose COMMIT is lost with its connection (a PostgreSQL failover) is run again;
with the ACL on, its requests' nonces went into the first attempt.  If that COMMIT did land, the
re-run must recognise its own nonces and answer as the first run would have, not 401
``NONCE_REPLAYED`` -- while a real replay of the same signed request is still refused.

The lost COMMIT is produced for real: on a primary whose synchronous standby is stopped, a commit
is made locally and then waits for the standby (``SyncRep``); terminating that backend
(``pg_terminate_backend``) drops the connection in the COMMIT, after the commit landed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine

from broker_service.domain.errors import Unauthenticated
from broker_service.settings import Flush
from broker_service.store import migrate
from broker_service.store.engine import make_engine
from broker_service.store.sqltx import SqlTx
from broker_service.store.writer import GroupCommitWriter
from drills.pg_cluster import PgCluster
from tests.acceptance.broker_service.store.standby import (
    create_kv,
    put,
    standby_stopped,
    waiting_for_standby,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def committing(cluster: PgCluster) -> Iterator[Engine]:
    """A writer engine whose commits wait for the synchronous standby (the server's default)."""
    url = cluster.url()
    migrate.upgrade(url)
    engine = make_engine(url, flush=Flush.SYNC, writer=True)
    create_kv(engine)
    yield engine
    engine.dispose()


def _rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(conn.execute(sql).fetchall())


async def test_a_rerun_after_a_lost_commit_recognises_its_own_nonce(
    cluster: PgCluster, committing: Engine
) -> None:
    dsn = cluster.primary.dsn("halfmq")
    nonce = ("bob-bank", "n0nce-rerun-1", 1_767_225_600_000)
    writer = GroupCommitWriter(committing)
    writer.start()
    try:
        with standby_stopped(cluster):
            answer = writer.submit(put("a"), nonce=nonce)
            waiting: list[int] = []
            for _ in range(1000):  # committed locally, waiting for the standby
                waiting = await asyncio.to_thread(waiting_for_standby, dsn)
                if waiting:
                    break
                await asyncio.sleep(0.01)
            assert waiting, "the COMMIT waits for the stopped standby"
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (waiting[0],))
        assert await answer == "a", "the re-run answers as the landed commit would have"
        assert _rows(dsn, "SELECT k FROM kv") == [("a",)]
        assert _rows(dsn, "SELECT nonce FROM acl_nonces") == [(nonce[1],)]
        with pytest.raises(Unauthenticated) as replay:  # the same signed request again
            await writer.submit(put("a"), nonce=nonce)
        assert replay.value.code == "NONCE_REPLAYED"
    finally:
        writer.stop()


def test_a_nonce_is_told_its_own_only_by_the_transaction_that_stored_it(pg_url: str) -> None:
    """What the re-run asks: the nonce stored by the lost attempt's transaction is its own; the
    same nonce stored by another transaction (a replay that got in first) is not."""
    migrate.upgrade(pg_url)
    engine = make_engine(pg_url, flush=Flush.SYNC, writer=True)
    nonce = ("bob-bank", "n0nce-owner-1", 1_767_225_600_000)
    try:
        with engine.begin() as conn:
            first = SqlTx(conn)
            assert first.remember_new_nonces([nonce])
            stored_by = first.nonce_xid
        assert stored_by is not None
        with engine.begin() as conn:
            again = SqlTx(conn)
            assert again.remember_nonces([nonce]) == [False]  # seen before
            assert again.nonces_inserted_by([nonce], stored_by) == [True]
            other = str(conn.exec_driver_sql("SELECT pg_current_xact_id()").scalar())
            assert again.nonces_inserted_by([nonce], other) == [False]
    finally:
        engine.dispose()
