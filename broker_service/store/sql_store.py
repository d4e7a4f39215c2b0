"""``SqlStore``: the :class:`~broker_service.domain.ports.Store` on SQLAlchemy (SQLite or PostgreSQL).

Writes go through the group-commit writer (one connection); reads run on a small pool in worker
threads.  The store refuses to serve (``NotReady``) while its schema is not at the migrations' head.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio.to_thread
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from broker_service.domain.errors import DomainError, NotReady
from broker_service.domain.ports import Command, NonceKey, Readiness
from broker_service.domain.retention.model import TABLES
from broker_service.settings import BrokerSettings, Flush
from broker_service.store import migrate
from broker_service.store.concurrent import ConcurrentUnits
from broker_service.store.engine import (
    LogSync,
    PgFlush,
    WalSync,
    is_sqlite,
    make_claims_engine,
    make_engine,
    sqlite_path,
)
from broker_service.store.failures import store_unavailable, unreachable_reason
from broker_service.store.sqltx import SqlTx
from broker_service.store.writer import GroupCommitWriter

log = logging.getLogger("halfmq.store")

_CLOSE_WAIT_SECONDS = 10.0

# The tables the purge and the nonces' expiry delete from, and when a purge round vacuums them
# (PostgreSQL): once their dead rows reach _DEAD_MIN and a twentieth of their live rows, each at
# most once every _VACUUM_SPACING_SECONDS (an operator's rounds back to back).
RECLAIMED = (*TABLES, "acl_nonces")
_DEAD_MIN = 1_000
_DEAD_SHARE = 20
_VACUUM_SPACING_SECONDS = 30.0
# The statistics' live and dead rows of each table (dead: deleted, or left by an update):
# no count(*).  A table's own deletes show there within a second or so; the purge's are also
# counted here (``SqlStore._dead``), so a round's own deletes are never missed.
_dead_rows = text(
    "SELECT relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables "
    "WHERE schemaname = current_schema() AND relname = ANY(:tables)"
)

T = TypeVar("T")


class InFlight:
    """Store work running in worker threads, so that closing waits for it before disposing.

    A connection still checked out when its engine is disposed is not closed: it goes back to a
    pool nothing holds any more and is closed only by the garbage collector, unannounced.  So the
    store stops taking work, waits for what runs, and only then disposes its engines.  The
    refusal is taken under the same lock as the count: a unit handed to a worker thread before
    the close but started after it would otherwise open a connection on a disposed engine (a
    fresh pool nothing closes), because the wait saw nothing running."""

    def __init__(self) -> None:
        self._running = 0
        self._closing = False
        self._idle = threading.Condition()

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._idle:
            if self._closing:
                raise NotReady("the broker is not ready: the broker is shutting down")
            self._running += 1
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                self._idle.notify_all()

    def close(self, timeout: float) -> bool:
        """Refuse new work; wait up to ``timeout`` seconds for the work running to finish."""
        with self._idle:
            self._closing = True
            return self._idle.wait_for(lambda: self._running == 0, timeout)


class SqlStore:
    def __init__(self, settings: BrokerSettings) -> None:
        self.url = settings.database_url
        self.readers = make_engine(
            self.url, flush=settings.flush, writer=False, pool_size=settings.pool_size
        )
        self.log_sync = _log_sync(self.url, settings.flush)
        self.writer_engine = make_engine(
            self.url, flush=settings.flush, writer=True, sync_apart=self.log_sync is not None
        )
        self.writer = GroupCommitWriter(
            self.writer_engine,
            batch_max=settings.write_batch_max,
            queue_max=settings.write_queue_max,
            syncer=self.log_sync,
        )
        self.pool_size = settings.pool_size
        self.flush = settings.flush
        self._claims: dict[bool, Engine] = {}
        self.inflight = InFlight()
        self._dead: dict[str, int] = {}  # rows purged since this store last vacuumed the table
        self._vacuumed_at: dict[str, float] = {}  # when this store last vacuumed it (monotonic)
        self.closed = False
        self.schema_current = False
        self.schema_reason = "starting"

    def claims_engine(self, *, durable: bool = False) -> Engine:
        """PostgreSQL: the pools consumer units run on beside the writer (made on first use)."""
        engine = self._claims.get(durable)
        if engine is None:
            engine = make_claims_engine(self.url, pool_size=self.pool_size, durable=durable)
            self._claims[durable] = engine
        return engine

    def claims_runner(self) -> ConcurrentUnits | None:
        """PostgreSQL: consumer units claim side by side, on the claims pools (acks and nacks as
        durably as ``flush`` says); SQLite: None -- its one writer serializes claims."""
        if is_sqlite(self.url):
            return None
        return ConcurrentUnits(
            self.claims_engine(),
            self.claims_engine(durable=self.flush is Flush.SYNC),
            ready=lambda: self.schema_current,
            inflight=self.inflight.hold,
        )

    @property
    def dialect(self) -> str:
        return self.readers.dialect.name

    def open(self, *, create_sqlite: bool = True) -> None:
        """Start the writer; a brand-new SQLite file is created at the current schema."""
        if create_sqlite and is_sqlite(self.url):
            path = sqlite_path(self.url)
            if path is not None and (not path.exists() or path.stat().st_size == 0):
                path.parent.mkdir(parents=True, exist_ok=True)
                log.info("creating a new SQLite store at %s", path)
                migrate.upgrade(self.url)
        self.check_schema()
        self.writer.start()

    def close(self) -> None:
        """Stop taking work, let the writer and the reads in flight finish, dispose the engines."""
        self.closed = True
        self.schema_current = False
        self.schema_reason = "the broker is shutting down"
        self.writer.stop()
        if self.log_sync is not None:
            self.log_sync.close()
        if not self.inflight.close(_CLOSE_WAIT_SECONDS):
            log.warning("closing the store with reads still running after %ss", _CLOSE_WAIT_SECONDS)
        self.writer_engine.dispose()
        self.readers.dispose()
        for engine in self._claims.values():
            engine.dispose()

    def check_schema(self) -> Readiness:
        """Read the schema's revision.  A store that cannot be read says nothing new of its
        schema: once found current it stays so (requests meanwhile answer 503
        ``STORE_UNAVAILABLE`` on their own), or a readiness probe that happens to run in a
        failover's window would keep the broker refusing until the next probe."""
        try:
            status = migrate.schema_status(self.readers)
        except DBAPIError as exc:
            reason = unreachable_reason(exc)
            if not self.schema_current:
                self.schema_reason = reason
            return Readiness(False, reason)
        if self.closed:  # a probe that read the schema while the store was closing
            return Readiness(False, self.schema_reason)
        self.schema_current = status.is_current
        if status.is_current:
            self.schema_reason = ""
        else:
            reason = (
                f"the store's schema is at {status.current or 'nothing'}, the broker needs "
                f"{status.head}: run `halfmq db upgrade --database-url <url>`"
            )
            if reason != self.schema_reason:  # said once, not at every probe or beat
                log.error("refusing to serve: %s", reason)
            self.schema_reason = reason
        return Readiness(status.is_current, self.schema_reason)

    def _guard(self) -> None:
        if not self.schema_current:
            raise NotReady(f"the broker is not ready: {self.schema_reason}")

    async def write(
        self, unit: Command[T] | Callable[[SqlTx], T], *, nonce: NonceKey | None = None
    ) -> T:
        """Through the group-commit writer, which plans its batch from the command's fields."""
        self._guard()
        result: T = await self.writer.submit(unit, nonce)
        return result

    async def read(self, unit: Callable[[SqlTx], T]) -> T:
        self._guard()
        return await anyio.to_thread.run_sync(self._read, unit)

    def _read(self, unit: Callable[[SqlTx], T]) -> T:
        try:
            with self.inflight.hold(), self.readers.connect() as conn:
                return unit(SqlTx(conn))
        except DomainError:
            raise
        except DBAPIError as exc:
            raise store_unavailable(exc) from exc

    async def ping(self) -> Readiness:
        def probe() -> Readiness:
            if self.closed:
                return Readiness(False, self.schema_reason)
            try:
                with self.inflight.hold():
                    with self.readers.connect() as conn:
                        conn.execute(text("SELECT 1"))
                    return self.check_schema()  # its connection is held against a close too
            except NotReady:  # closed since the check above
                return Readiness(False, self.schema_reason)
            except DBAPIError as exc:
                return Readiness(False, unreachable_reason(exc))

        return await anyio.to_thread.run_sync(probe)

    def stats(self) -> dict[str, Any]:
        return {"batches": self.writer.batches, "units": self.writer.units}

    async def reclaim(self, purged: Mapping[str, int]) -> list[str]:
        """After a purge round (:class:`~broker_service.domain.ports.StoreUpkeep`) that deleted
        ``purged`` rows by table.  PostgreSQL reuses a deleted or updated row's space only once
        a VACUUM has passed, and autovacuum waits for a fifth of a table to be dead (or is off,
        or behind): every table the purge or the nonces' expiry deletes from (``RECLAIMED``)
        whose dead rows reach ``_DEAD_MIN`` and a twentieth of its live rows is vacuumed now,
        at most once every ``_VACUUM_SPACING_SECONDS``, on a connection of its own (VACUUM
        cannot run in a transaction), beside the writer.  Not FULL: the space is reused, the
        table is not rewritten, and nothing is locked against the writer.  SQLite gives pages
        back in the purge's own units (``compact``)."""
        self._guard()
        if self.dialect != "postgresql":
            return []
        for table, n in purged.items():
            if table in RECLAIMED:
                self._dead[table] = self._dead.get(table, 0) + n
        return await anyio.to_thread.run_sync(self._vacuum)

    def _due(self, found: Iterable[Any]) -> list[str]:
        """The tables of ``found`` (name, live rows, dead rows) to vacuum now."""
        now = time.monotonic()
        due = []
        for name, live, dead_seen in found:
            table = str(name)
            dead = max(int(dead_seen), self._dead.get(table, 0))
            if dead < _DEAD_MIN or dead * _DEAD_SHARE < int(live):
                continue
            last = self._vacuumed_at.get(table)
            if last is None or now - last >= _VACUUM_SPACING_SECONDS:
                due.append(table)
        return due

    def _vacuum(self) -> list[str]:
        done: list[str] = []
        try:
            with self.inflight.hold(), self.readers.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                for table in self._due(conn.execute(_dead_rows, {"tables": list(RECLAIMED)})):
                    conn.exec_driver_sql(f'VACUUM (ANALYZE) "{table}"')
                    self._dead[table] = 0
                    self._vacuumed_at[table] = time.monotonic()
                    done.append(table)
        except DBAPIError as exc:
            raise store_unavailable(exc) from exc
        if done:
            log.info("vacuumed %s after the purge", ", ".join(sorted(done)))
        return sorted(done)


def _log_sync(url: str, flush: Flush) -> LogSync | None:
    """Under ``flush: sync``, what makes the writer's commits durable apart from them: SQLite's
    WAL fsynced (:class:`WalSync`), PostgreSQL's WAL flushed by a commit of its own
    (:class:`PgFlush`); None under ``flush: async``, where the commits wait for nothing."""
    if flush is not Flush.SYNC:
        return None
    if is_sqlite(url):
        path = sqlite_path(url)
        return None if path is None else WalSync(path)
    return PgFlush(url)
