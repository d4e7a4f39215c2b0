"""SQLite under ``flush: sync``: the writer commits without fsyncing (``synchronous=NORMAL``) and a
flusher thread fsyncs the WAL before it answers the batches that fsync covers.  Nothing may be
answered before its commit is on disk, batches are answered in commit order, and a failed fsync
answers 503 from then on."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from broker_service.domain.errors import NotReady
from broker_service.settings import BrokerSettings, Flush
from broker_service.store import migrate
from broker_service.store.engine import WalSync, make_engine, sqlite_path
from broker_service.store.sql_store import SqlStore
from broker_service.store.writer import GroupCommitWriter


@pytest.fixture
def sqlite_store(sqlite_url: str) -> str:
    migrate.upgrade(sqlite_url)
    return sqlite_url


@pytest.fixture
def apart(sqlite_store: str) -> Iterator[Engine]:
    engine = make_engine(sqlite_store, flush=Flush.SYNC, writer=True, sync_apart=True)
    yield engine
    engine.dispose()


def _insert(value: str) -> Callable[[Any], str]:
    def unit(tx: Any) -> str:
        tx.conn.execute(
            text("INSERT INTO kv (k) VALUES (:k)"),
            {"k": value},
        )
        return value

    return unit


def _table(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS kv (k TEXT)"))


def _stored(url: str) -> list[str]:
    readers = make_engine(url, flush=Flush.SYNC, writer=False)
    try:
        with readers.connect() as conn:
            return [str(k) for (k,) in conn.execute(text("SELECT k FROM kv ORDER BY rowid"))]
    finally:
        readers.dispose()


def test_a_sync_store_on_sqlite_fsyncs_apart_and_its_writer_commits_normal(
    sqlite_store: str,
) -> None:
    store = SqlStore(BrokerSettings(database_url=sqlite_store, flush=Flush.SYNC))
    try:
        assert isinstance(store.log_sync, WalSync)
        with store.writer_engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    finally:
        store.close()
    relaxed = SqlStore(BrokerSettings(database_url=sqlite_store, flush=Flush.ASYNC))
    try:
        assert relaxed.log_sync is None, "flush=async does not fsync at all, as before"
    finally:
        relaxed.close()


async def test_nothing_is_answered_before_the_fsync_that_covers_it(
    apart: Engine, sqlite_store: str
) -> None:
    _table(apart)
    gate = threading.Event()
    synced: list[int] = []

    def syncer() -> None:
        gate.wait(10)
        synced.append(len(_stored(sqlite_store)))

    writer = GroupCommitWriter(apart, syncer=syncer)
    writer.start()
    try:
        first = writer.submit(_insert("a"))
        for _ in range(200):  # committed (another connection sees it) ...
            if _stored(sqlite_store) == ["a"]:
                break
            await asyncio.sleep(0.01)
        assert _stored(sqlite_store) == ["a"]
        second = writer.submit(_insert("b"))  # ... and the writer goes on meanwhile
        for _ in range(200):
            if _stored(sqlite_store) == ["a", "b"]:
                break
            await asyncio.sleep(0.01)
        assert _stored(sqlite_store) == ["a", "b"], "the next batch commits during the fsync"
        await asyncio.sleep(0.05)
        assert not first.done(), "but nothing is answered before its fsync"
        assert not second.done()
        gate.set()
        assert await first == "a"
        assert await second == "b"
        assert synced[0] >= 1, "the fsync began after the commit it covers"
    finally:
        gate.set()
        writer.stop()


async def test_a_failed_fsync_answers_503(apart: Engine, sqlite_store: str) -> None:
    _table(apart)
    path = sqlite_path(sqlite_store)
    assert path is not None
    real = WalSync(path)
    fail = {"now": False}

    def syncer() -> None:
        if fail["now"]:
            os.fsync(-1)  # EBADF: an fsync that fails, as EIO would
        real()

    writer = GroupCommitWriter(apart, syncer=syncer)
    writer.start()
    try:
        assert await writer.submit(_insert("a")) == "a"
        fail["now"] = True
        with pytest.raises(NotReady) as refused:
            await writer.submit(_insert("b"))
        assert refused.value.code == "STORE_UNAVAILABLE"
    finally:
        writer.stop()
        real.close()


def test_a_wal_sync_that_failed_once_fails_for_good(sqlite_store: str) -> None:
    path = sqlite_path(sqlite_store)
    assert path is not None
    sync = WalSync(path)
    sync.wal = Path("/dev/null")  # fsync(2) of /dev/null fails (EINVAL), as a disk's EIO would
    try:
        with pytest.raises(OSError, match="Invalid argument"):
            sync()
        sync.wal = Path(f"{path}-wal")
        with pytest.raises(OSError, match="Invalid argument"):
            sync()  # the kernel may have dropped what it could not write: never "synced" again
    finally:
        sync.close()


def test_the_wal_made_again_is_the_one_synced(sqlite_store: str) -> None:
    """All connections closed, SQLite deletes the WAL; the next one makes a new file, which the
    sync must follow (an fsync of the old, unlinked one would cover nothing)."""
    path = sqlite_path(sqlite_store)
    assert path is not None
    sync = WalSync(path)
    try:
        for round_ in range(2):
            engine = make_engine(sqlite_store, flush=Flush.SYNC, writer=True, sync_apart=True)
            _table(engine)
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO kv (k) VALUES (:k)"), {"k": str(round_)})
            sync()
            assert sync._inode == os.stat(f"{path}-wal").st_ino
            engine.dispose()
        assert _stored(sqlite_store) == ["0", "1"]
    finally:
        sync.close()


async def test_stop_returns_while_the_sync_hangs(
    apart: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A sync that never returns (a synchronous standby gone) fills the committed batches' queue
    and then holds the writer; stopping still returns, in bounded time, and says what it left."""
    from broker_service.store import writer as writer_module

    monkeypatch.setattr(writer_module, "_STOP_SECONDS", 0.3)
    _table(apart)
    release = threading.Event()

    def hanging_sync() -> None:
        release.wait(30)

    writer = GroupCommitWriter(apart, batch_max=1, syncer=hanging_sync)
    writer.start()
    committing, flushing = writer._thread, writer._flusher
    assert committing is not None
    assert flushing is not None
    try:
        pending = [writer.submit(_insert(f"v{i}")) for i in range(4 * writer_module._AHEAD)]
        for _ in range(200):  # the writer blocks once _AHEAD batches wait for the sync
            if writer._synced.full():
                break
            await asyncio.sleep(0.01)
        assert writer._synced.full()
        began = asyncio.get_running_loop().time()
        with caplog.at_level("WARNING", logger="halfmq.store.writer"):
            writer.stop()
        assert asyncio.get_running_loop().time() - began < 5
        assert "did not stop" in caplog.text
        await asyncio.sleep(0.1)  # an answer would be settled on this loop: let it run
        assert not any(future.done() for future in pending), "nothing answered unsynced"
    finally:  # let the threads it left behind end
        release.set()
        committing.join(10)
        writer._synced.put(writer_module._STOP, timeout=10)
        flushing.join(10)
        assert not committing.is_alive()
        assert not flushing.is_alive()


async def test_a_sync_that_keeps_failing_is_logged_once_and_its_end_once(
    apart: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Every write is refused while the sync fails, but the log says so once (and again a
    minute later), not once a round of writes; and once more when a sync works again."""
    _table(apart)
    broken = threading.Event()
    broken.set()

    def sync() -> None:
        if broken.is_set():
            raise OSError(5, "Input/output error")

    writer = GroupCommitWriter(apart, syncer=sync)
    writer.start()
    try:
        with caplog.at_level("WARNING", logger="halfmq.store.writer"):
            for i in range(5):
                with pytest.raises(NotReady):
                    await writer.submit(_insert(f"refused-{i}"))
            broken.clear()
            assert await writer.submit(_insert("kept")) == "kept"
        lines = [(r.levelname, r.getMessage()) for r in caplog.records]
        assert [level for level, _ in lines] == ["ERROR", "WARNING"], lines
        assert "could not be made durable" in lines[0][1]
        assert "durable again" in lines[1][1]
        assert "5 syncs failed" in lines[1][1]
    finally:
        writer.stop()
