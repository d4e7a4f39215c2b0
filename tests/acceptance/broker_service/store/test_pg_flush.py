"""PostgreSQL under ``flush: sync``: the writer commits with ``synchronous_commit = off`` and a
flusher thread makes the WAL durable (locally, and on the synchronous standby) with a synchronous
commit of its own before it answers the batches that commit covers.  Nothing may be answered
before it; a lost flush connection answers 503, never 2xx, and the next flush connects again; a
commit the flush cannot vouch for (another server, or before the flush's connection) is 503 too."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text

from broker_service.domain.errors import InvalidRequest, NotReady
from broker_service.settings import BrokerSettings, Flush
from broker_service.store import migrate
from broker_service.store.engine import Covered, FlushNotAllowed, PgFlush, make_engine
from broker_service.store.sql_store import SqlStore
from broker_service.store.writer import GroupCommitWriter
from drills.pg_cluster import PgCluster
from tests.acceptance.broker_service.store.standby import (
    create_kv,
    put,
    standby_stopped,
    waiting_for_standby,
)


@pytest.fixture
def apart(pg_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_url, flush=Flush.SYNC, writer=True, sync_apart=True)
    create_kv(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def flush(pg_url: str) -> Iterator[PgFlush]:
    syncer = PgFlush(pg_url)
    yield syncer
    syncer.close()


def _stored(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [str(k) for (k,) in conn.execute(text("SELECT k FROM kv ORDER BY k"))]
    finally:
        engine.dispose()


def test_a_sync_store_on_postgresql_commits_asynchronously_and_flushes_apart(
    pg_url: str,
) -> None:
    migrate.upgrade(pg_url)
    store = SqlStore(BrokerSettings(database_url=pg_url, flush=Flush.SYNC))
    try:
        assert isinstance(store.log_sync, PgFlush)
        with store.writer_engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "off"
        with store.readers.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
    finally:
        store.close()
    relaxed = SqlStore(BrokerSettings(database_url=pg_url, flush=Flush.ASYNC))
    try:
        assert relaxed.log_sync is None, "flush=async waits for no flush at all, as before"
    finally:
        relaxed.close()


async def test_nothing_is_answered_before_the_flush_that_covers_it(
    apart: Engine, flush: PgFlush, pg_url: str
) -> None:
    gate = threading.Event()
    seen: list[list[str]] = []

    class Gated(PgFlush):
        def __call__(self) -> Covered:
            gate.wait(10)
            seen.append(_stored(pg_url))
            return flush()

        def connect(self) -> None:
            flush.connect()

        def server(self, conn: Any) -> object:
            return flush.server(conn)

    gated = Gated(pg_url)
    writer = GroupCommitWriter(apart, syncer=gated)
    writer.start()
    try:
        first = writer.submit(put("a"))
        for _ in range(500):  # committed: another connection sees it ...
            if _stored(pg_url) == ["a"]:
                break
            await asyncio.sleep(0.01)
        second = writer.submit(put("b"))  # ... and the writer goes on meanwhile
        for _ in range(500):
            if _stored(pg_url) == ["a", "b"]:
                break
            await asyncio.sleep(0.01)
        assert _stored(pg_url) == ["a", "b"], "the next batch commits while the flush waits"
        assert not first.done(), "but nothing is answered before its flush"
        assert not second.done()
        gate.set()
        assert await first == "a"
        assert await second == "b"
        assert seen[0][:1] == ["a"], "the flush began after the commit it covers"
    finally:
        gate.set()
        writer.stop()
        gated.close()


async def test_a_lost_flush_connection_answers_503_and_the_next_flush_connects_again(
    apart: Engine, flush: PgFlush, pg_url: str
) -> None:
    writer = GroupCommitWriter(apart, syncer=flush)
    writer.start()
    try:
        assert await writer.submit(put("a")) == "a"
        killer = create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with killer.connect() as conn:
            pid = flush._conn.dbapi_connection.info.backend_pid
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        killer.dispose()
        with pytest.raises(NotReady) as refused:
            await writer.submit(put("b"))
        assert refused.value.code == "STORE_UNAVAILABLE"
        assert await writer.submit(put("c")) == "c", "a new flush connection, made at once"
    finally:
        writer.stop()


async def test_a_flush_connection_lost_while_idle_is_replaced_before_the_next_commit(
    apart: Engine, flush: PgFlush, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while nothing was written (a server's idle_session_timeout, a firewall): the idle
    flusher notices and connects again, so the next write is answered, not refused."""
    from broker_service.store import writer as writer_module

    monkeypatch.setattr(writer_module, "_IDLE_SECONDS", 0.1)
    writer = GroupCommitWriter(apart, syncer=flush)
    writer.start()
    try:
        assert await writer.submit(put("a")) == "a"
        pid = flush._conn.dbapi_connection.info.backend_pid
        killer = create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with killer.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        killer.dispose()
        for _ in range(100):
            await asyncio.sleep(0.05)
            conn_now = flush._conn
            if conn_now is not None and conn_now.dbapi_connection.info.backend_pid != pid:
                break
        assert await writer.submit(put("b")) == "b"
    finally:
        writer.stop()


class Vouching(PgFlush):
    """A real flush (``real``), which then claims to cover what ``covers`` makes of its answer:
    another server, or a connection made later than it was."""

    def __init__(self, url: str, real: PgFlush, covers: Callable[[Covered], Covered]) -> None:
        super().__init__(url)
        self.real, self.covers = real, covers

    def __call__(self) -> Covered:
        return self.covers(self.real())

    def server(self, conn: Any) -> object:
        return self.real.server(conn)


@contextlib.contextmanager
def writing(engine: Engine, syncer: PgFlush) -> Iterator[GroupCommitWriter]:
    writer = GroupCommitWriter(engine, syncer=syncer)
    writer.start()
    try:
        yield writer
    finally:
        writer.stop()
        syncer.close()


async def refused(answer: Awaitable[Any]) -> None:
    with pytest.raises(NotReady) as error:
        await answer
    assert error.value.code == "STORE_UNAVAILABLE"


async def test_a_commit_the_flush_cannot_vouch_for_answers_503(
    apart: Engine, flush: PgFlush, pg_url: str
) -> None:
    """Committed on another server than the flush ran on (a failover between), or before the
    flush's connection was made (the server may have restarted since): 503, never 2xx."""
    elsewhere = Vouching(pg_url, flush, lambda c: Covered(("another", "server"), c.since))
    later = Vouching(pg_url, flush, lambda c: Covered(c.server, float("inf")))
    for syncer in (elsewhere, later):
        with writing(apart, syncer) as writer:
            await refused(writer.submit(put("x")))


async def test_an_error_answer_the_flush_cannot_vouch_for_answers_503(
    apart: Engine, flush: PgFlush, pg_url: str
) -> None:
    """An error answer may rest on a commit that was lost ("already committed", read from a
    commit the server lost in a restart): a batch of error answers alone is refused too."""

    def refuse(tx: Any) -> str:
        put("seen")(tx)
        raise InvalidRequest("read from what an uncovered commit wrote")

    later = Vouching(pg_url, flush, lambda c: Covered(c.server, float("inf")))
    with writing(apart, later) as writer:
        await refused(writer.submit(refuse))


async def test_a_flush_connection_made_while_a_batch_ran_does_not_cover_it(
    apart: Engine, flush: PgFlush, pg_url: str
) -> None:
    """The batch's time is taken before its commit: a flush connection made (a server restarted)
    while the batch ran, before or after its COMMIT, cannot vouch for it."""
    made: list[float] = []

    def unit(tx: Any) -> str:
        value = put("during")(tx)
        made.append(time.monotonic())  # the flush "connects" now, before this batch commits
        return value

    meanwhile = Vouching(pg_url, flush, lambda c: Covered(c.server, made[0]))
    with writing(apart, meanwhile) as writer:
        await refused(writer.submit(unit))
        made[0] = 0.0  # a connection made before the batch covers it
        assert await writer.submit(put("after")) == "after"


async def test_a_value_the_store_refuses_is_a_400_under_the_flush(
    apart: Engine, flush: PgFlush
) -> None:
    """The failure drops the writer's connection; its answer is still the batch's, on the server
    the flush vouches for: 400 INVALID_VALUE, not a 503 the client would retry without end."""
    with writing(apart, flush) as writer:
        with pytest.raises(InvalidRequest) as error:
            await writer.submit(put("a\x00b"))  # PostgreSQL's text holds no NUL
        assert error.value.code == "INVALID_VALUE"
        assert await writer.submit(put("fine")) == "fine"


def test_a_closed_flush_never_connects_again(flush: PgFlush) -> None:
    """A flusher left running after the store closed (its stop timed out) cannot make a
    connection that would outlive the store."""
    flush()
    flush.close()
    with pytest.raises(RuntimeError, match="closed"):
        flush.connect()
    with pytest.raises(RuntimeError, match="closed"):  # the retry after the failure is refused
        flush()
    assert flush._conn is None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_flush_waits_for_the_synchronous_standby(cluster: PgCluster) -> None:
    """With the standby stopped, the flush's commit waits for it (``SyncRep``) and returns once
    it is back; a commit that takes a transaction id but writes nothing else does not wait at
    all (PostgreSQL commits it asynchronously), which is why the flush writes a WAL record."""
    dsn = cluster.primary.dsn("halfmq")
    syncer = PgFlush(cluster.url())
    syncer()
    with standby_stopped(cluster):
        with psycopg.connect(dsn, autocommit=True) as bare:
            bare.execute("SELECT pg_current_xact_id()")  # returns: no wait for the standby
        done = threading.Event()
        worker = threading.Thread(target=lambda: (syncer(), done.set()), daemon=True)
        worker.start()
        pid = syncer._conn.dbapi_connection.info.backend_pid
        for _ in range(1000):
            if pid in waiting_for_standby(dsn):
                break
            threading.Event().wait(0.01)
        assert pid in waiting_for_standby(dsn), "the flush waits for the standby"
        assert not done.is_set()
    worker.join(30)
    assert done.is_set(), "and returns once the standby has the WAL"
    syncer.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_role_that_may_not_flush_is_told_how_to_mend_it(cluster: PgCluster) -> None:
    """A hosted PostgreSQL may revoke pg_logical_emit_message from PUBLIC: the flush's connect
    says so when the writer starts (not at the first write), and every write it refuses names
    the GRANT -- never a 2xx."""
    cluster.execute(
        "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC",
        database="halfmq",
    )
    cluster.execute("CREATE ROLE app LOGIN")
    cluster.execute("GRANT ALL ON SCHEMA public TO app", database="halfmq")
    url = cluster.url().replace("://postgres@", "://app@", 1)
    syncer = PgFlush(url)
    with pytest.raises(FlushNotAllowed, match="GRANT EXECUTE ON FUNCTION pg_logical_emit_message"):
        syncer.connect()
    engine = make_engine(url, flush=Flush.SYNC, writer=True, sync_apart=True)
    create_kv(engine)
    try:
        with writing(engine, syncer) as writer:
            with pytest.raises(NotReady, match="GRANT EXECUTE") as error:
                await writer.submit(put("x"))
            assert error.value.code == "STORE_UNAVAILABLE"
    finally:
        engine.dispose()
