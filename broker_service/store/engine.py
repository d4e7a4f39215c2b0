"""Engines for SQLite and PostgreSQL, with the commit settings that ``flush`` asks for.

``flush: sync`` (RocketMQ's SYNC_FLUSH): PostgreSQL ``synchronous_commit=on``; SQLite
``synchronous=FULL`` (the WAL fsynced at every commit) -- except the broker's writer
(``sync_apart``), which commits without waiting for the disk (SQLite ``synchronous=NORMAL``,
PostgreSQL ``synchronous_commit=off``) and has a flusher make its commits durable before it
answers anyone: :class:`WalSync` fsyncs SQLite's WAL, :class:`PgFlush` commits a transaction of
its own synchronously.  ``flush: async`` (ASYNC_FLUSH): SQLite
``synchronous=NORMAL`` and PostgreSQL ``synchronous_commit=off`` -- faster, and a power loss can take
the last moments of acknowledged writes (a process crash cannot).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

from broker_service.settings import Flush
from broker_service.store.failures import driver_message

log = logging.getLogger("halfmq.store")


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL (None for in-memory databases)."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(
    url: str, *, flush: Flush, writer: bool, pool_size: int = 5, sync_apart: bool = False
) -> Engine:
    """One engine per role: the writer (one connection, owned by the group-commit thread) or
    readers.  ``sync_apart`` (the writer): its commits do not wait for the disk themselves
    (SQLite ``synchronous=NORMAL``, PostgreSQL ``synchronous_commit=off``); the writer makes
    them durable with :class:`WalSync` or :class:`PgFlush` before it answers anyone, apart from
    the next commit."""
    if is_sqlite(url):
        return _sqlite_engine(
            url, flush=flush, writer=writer, pool_size=pool_size, sync_apart=sync_apart
        )
    return _postgres_engine(
        url, flush=flush, writer=writer, pool_size=pool_size, sync_apart=sync_apart
    )


class LogSync:
    """Makes the writer's commits durable, apart from them (the writer's flusher calls it)."""

    def __call__(self) -> Covered | None:
        """Make durable every commit made before the call: None (every one is covered) or what
        is (:class:`Covered`)."""
        raise NotImplementedError

    def server(self, conn: Connection) -> object:
        """The server a new connection of the writer is on (for :class:`Covered`)."""
        return None

    def connect(self) -> None:
        """Be ready to sync (the writer calls it before its first commit)."""

    def close(self) -> None:
        """Let go of what it holds (the store is closing)."""

    def keep_alive(self) -> None:
        """Nothing waited for a sync a while (the flusher calls it when idle): find out now
        whether the sync still works, rather than with the next batch."""


class WalSync(LogSync):
    """SQLite under ``flush: sync``: the WAL's fsync, made apart from the commits it covers.

    ``synchronous=FULL`` fsyncs the WAL inside each commit, while the writer holds the write lock
    and waits.  With ``synchronous=NORMAL`` a commit only writes its frames, and one ``fsync`` of
    the WAL file then makes every frame written before it durable (an fsync covers the file, not a
    descriptor).  So the writer commits a batch, hands it to a flusher thread that fsyncs and only
    then answers it, and meanwhile runs the next batch: RocketMQ's GroupCommitService.  What the
    two modes leave on disk is the same: a checkpoint and a WAL restart are synced by SQLite
    itself in NORMAL mode too (its header and the database file), a commit's frames are synced
    here before anyone hears of the commit, and a frame torn by a power loss fails its checksum,
    so recovery stops at the last whole commit -- as with FULL, whose commits are also written
    before they are synced."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.wal = Path(f"{database}-wal")
        self._fd: int | None = None
        self._inode = 0
        self._failed: OSError | None = None

    def __call__(self) -> None:
        """fsync the WAL (every commit before it is covered).  Once an fsync has failed, every later call fails: the kernel may have
        dropped the pages it could not write, and a later fsync that succeeds says nothing of
        them (PostgreSQL stops for the same reason)."""
        if self._failed is not None:
            raise self._failed
        try:
            self._sync()
        except OSError as exc:
            self._failed = exc
            raise

    def _sync(self) -> None:
        try:
            inode = os.stat(self.wal).st_ino
        except FileNotFoundError:  # no WAL (yet): what was committed is in the database file
            self._sync_path(self.database)
            return
        if self._fd is None or inode != self._inode:  # the WAL was made again: its new file
            self.close()
            self._fd = os.open(self.wal, os.O_RDONLY)
            self._inode = os.fstat(self._fd).st_ino
            self._sync_path(self.wal.parent)  # its directory entry, once per WAL file
        os.fsync(self._fd)

    @staticmethod
    def _sync_path(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class Covered:
    """What a :class:`PgFlush` made durable: every commit on ``server`` (an identity of the
    PostgreSQL server) that returned after ``since`` (``time.monotonic()``), when its flush
    connection was made: that connection lived from then to the flush, so the server did not
    restart in between."""

    server: object
    since: float


# A store error's text never shows the statement's parameters: they can hold an ACL's secret keys
# (a published version) and message bodies, and the error may reach a log line.
HIDE_PARAMETERS = True

# Which server a connection is on: its address, its port and when its postmaster started (a
# promoted standby or a restarted server is another).
_SERVER = (
    "SELECT inet_server_addr()::text, current_setting('port'), pg_postmaster_start_time()::text"
)
# Whether the role may execute the flush's function: the text-content one of its forms, by oid
# (PostgreSQL 17 gave it a fourth, defaulted argument), true when there is none to ask about.
_MAY_FLUSH = (
    "SELECT coalesce(bool_and(has_function_privilege(oid, 'EXECUTE')), true) FROM pg_proc"
    " WHERE proname = 'pg_logical_emit_message' AND pronamespace = 'pg_catalog'::regnamespace"
    " AND proargtypes[2] = 'text'::regtype"
)
# The cheapest statement whose commit waits for the WAL: it writes one WAL record of its own (a
# transactional logical message: no row, no lock), so its commit, under synchronous_commit = on,
# waits for the WAL to be flushed up to its commit record -- and on a synchronous standby too --
# which covers every commit inserted before it.  A transaction that wrote no WAL commits without
# waiting, even one holding a transaction id: PostgreSQL decides on the WAL written
# (RecordTransactionCommit), so SELECT 1 or SELECT pg_current_xact_id() would cover nothing --
# the second failed the failover test (docs/store.md).
_FLUSH = "SELECT pg_logical_emit_message(true, 'halfmq.flush', '')"


class FlushNotAllowed(RuntimeError):
    """The broker's PostgreSQL role may not run the flush (``flush: sync``)."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"{why}: flush: sync on PostgreSQL needs EXECUTE on pg_logical_emit_message -- "
            "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) TO the "
            "broker's role (PostgreSQL 17 and later: (boolean, text, text, boolean)), or run with "
            "flush: async (docs/store.md)"
        )


class PgFlush(LogSync):
    """PostgreSQL under ``flush: sync``: the WAL's flush, made apart from the commits it covers.

    The writer commits with ``synchronous_commit = off``: the commit returns once its record is
    in the WAL buffers.  PostgreSQL's WAL is one sequence, flushed in order, locally and on a
    synchronous standby alike, so a synchronous commit made after it (:data:`_FLUSH`, on a
    connection of its own in autocommit, with the server's ``synchronous_commit``) returns only
    once the WAL up to that later commit record -- the writer's commits before it included -- is
    flushed, and replicated to the synchronous standby when one is configured.  One such commit
    answers every batch the writer committed before it began: RocketMQ's GroupCommitService.

    It answers what it covers (:class:`Covered`): a commit on another server (a failover between
    the writer's commit and the flush), or before the flush's connection was made (the server may
    have restarted and lost it), is not covered and its requests are refused, never answered
    2xx.  A failed flush drops its connection and raises; the next one connects again (unlike
    SQLite's fsync, nothing is lost for good: PostgreSQL itself stops on a failed fsync)."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, pool_size=1, max_overflow=0, isolation_level="AUTOCOMMIT")
        self._conn: Any = None  # the driver's connection, in autocommit
        self._covered: Covered | None = None
        # Set by close(): a flusher still running then (left behind by a stop that timed out)
        # must not connect again, or its connection would outlive the store.
        self._lock = threading.Lock()
        self._closed = False

    def server(self, conn: Connection) -> object:
        """The server the writer's new connection is on (read once per connection)."""
        server = tuple(conn.exec_driver_sql(_SERVER).one())
        conn.rollback()  # the read began a transaction; the writer begins its own
        return server

    def connect(self) -> None:
        """Connect now if not connected: what the writer commits from now on can be covered.
        Not under the lock: close() must not wait for a connect that hangs on the network."""
        if self._covered is not None:
            return
        if self._closed:
            raise RuntimeError("the store's log sync is closed")
        conn = self.engine.raw_connection()
        try:
            cursor = conn.cursor()
            cursor.execute(_SERVER)
            server = tuple(cursor.fetchone() or ())
            # A role that may not flush is told now, and how to mend it (asked, not tried: a
            # flush would wait here for a synchronous standby that is away).
            cursor.execute(_MAY_FLUSH)
            allowed = bool((cursor.fetchone() or (True,))[0])
            cursor.close()
        except Exception:
            conn.invalidate()
            raise
        if not allowed:
            conn.invalidate()
            raise FlushNotAllowed("permission denied for function pg_logical_emit_message")
        with self._lock:
            installed = not self._closed and self._covered is None
            if installed:
                self._conn, self._covered = conn, Covered(server, time.monotonic())
        if not installed:
            conn.invalidate()
            if self._closed:
                raise RuntimeError("the store's log sync is closed")

    def __call__(self) -> Covered:
        try:
            self.connect()
            conn, covered = self._conn, self._covered
            if conn is None or covered is None:  # closed meanwhile
                raise RuntimeError("the store's log sync is closed")
            with conn.cursor() as cursor:
                cursor.execute(_FLUSH)
        except Exception:
            self._disconnect()
            # Connected again at once where possible: the commits waiting now are refused
            # either way, those from now on need not be.
            with contextlib.suppress(Exception):
                self.connect()
            raise
        return covered

    def keep_alive(self) -> None:
        """A flush with nothing waiting: a connection that died while idle (the server's
        ``idle_session_timeout``, a firewall's, a restart) is replaced now, before the next
        commit -- which it then covers -- instead of failing that commit's flush with a 503."""
        try:
            self()
        except Exception as exc:
            log.info("the store's idle flush connection failed (%s)", driver_message(exc))

    def _disconnect(self) -> None:
        with self._lock:
            conn, self._conn, self._covered = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):  # gone either way
                conn.invalidate()

    def close(self) -> None:
        self._closed = True  # read by connect(), which takes the lock only to install its result
        self._disconnect()
        self.engine.dispose()


def make_claims_engine(url: str, *, pool_size: int = 5, durable: bool = False) -> Engine:
    """PostgreSQL: a pool consumer units run on side by side (receive, ack, nack).

    Two of them: leases (a receive, a change of invisibility) commit with ``synchronous_commit =
    off`` -- losing one in a database crash only hands the message out again -- and ``durable``
    ones (acks and nacks under ``flush: sync``) commit as PostgreSQL's default says, each unit
    without a ``SET LOCAL`` round trip of its own.  No pre-ping: the units retry on a fresh
    connection when one is found dead, which saves a round trip per unit.
    """
    engine = create_engine(url, **_pool(False, pool_size))
    if not durable:
        _commit_asynchronously(engine)
    return engine


def _commit_asynchronously(engine: Engine) -> None:
    """PostgreSQL: every session of the engine starts with ``synchronous_commit = off``."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        with dbapi_conn.cursor() as cursor:
            cursor.execute("SET synchronous_commit = off")
        dbapi_conn.commit()


def _pool(writer: bool, pool_size: int) -> dict[str, Any]:
    """An engine's pool: the writer's one connection, or ``pool_size`` and as many again."""
    return {
        "pool_size": 1 if writer else pool_size,
        "max_overflow": 0 if writer else pool_size,
        "hide_parameters": HIDE_PARAMETERS,
    }


def _sqlite_engine(
    url: str, *, flush: Flush, writer: bool, pool_size: int, sync_apart: bool = False
) -> Engine:
    engine = create_engine(
        url,
        **_pool(writer, pool_size),
        connect_args={"check_same_thread": False, "timeout": 30},
        # The writer's connection always ends its transaction itself (commit, or rollback on an
        # error): no reset when it goes back to the pool.
        pool_reset_on_return=None if writer else "rollback",
    )
    synchronous = "FULL" if flush is Flush.SYNC and not sync_apart else "NORMAL"

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin event issue BEGIN itself (pysqlite's own is deferred and late).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=OFF")
        cursor.execute("PRAGMA temp_store=MEMORY")
        if writer:
            # A bigger page cache for the indexes the writer maintains (readers keep the default:
            # there are many of them), and fewer, larger WAL checkpoints (they run in a commit).
            # 32 MB: the indexes grow at their right edge, and 64 MB cost memory without speed
            # (bench/README.md, "Figures, fourth round", the writer's SQLite page cache).
            cursor.execute("PRAGMA cache_size=-32768")
            cursor.execute("PRAGMA wal_autocheckpoint=8192")
        cursor.close()

    begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Straight to the driver: SQLAlchemy's statement machinery costs more than the BEGIN.
        conn.connection.dbapi_connection.execute(begin)

    return engine


def _postgres_engine(
    url: str, *, flush: Flush, writer: bool, pool_size: int, sync_apart: bool = False
) -> Engine:
    engine = create_engine(
        url,
        **_pool(writer, pool_size),
        # The writer runs again, on a fresh connection, the units of a batch that failed (see
        # store/writer.py): a ping before each batch would cost a round trip for nothing.
        pool_pre_ping=not writer,
    )
    if writer and (flush is Flush.ASYNC or sync_apart):
        _commit_asynchronously(engine)
    return engine
