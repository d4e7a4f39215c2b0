"""Group commit: one thread owns the store's write connection and commits many units at once.

Requests put their unit of work on a queue and await a future.  The writer thread takes everything
waiting (up to ``batch_max``), runs it in one store transaction, flushes the buffered appends, commits
-- one fsync for the whole batch -- and only then answers every caller.  While it commits, the next
batch gathers, so the batch size follows the load with no timer.

A unit comes as a :class:`~broker_service.domain.ports.Command`, whose fields the writer plans the
batch from: the transactions of its commands (``transaction_ids``) are read in one lookup, as are
the earlier sends they look for (``dedup_keys``).  A bare function is a plain unit.

A signed request's nonce (the command's ``nonce``) rides with its unit: the batch's nonces are
remembered in one statement before the units run, and a unit whose nonce was seen before is
answered ``Replayed`` unrun.  The statement only counts what it inserted; when that falls short (a
replay in the batch) the batch runs again, its nonces told apart one by one.

A unit that raises a :class:`DomainError` is dropped from the batch (its appends undone) and answered
with the error.  In a batch of several units on PostgreSQL a resolution may be ``DEFERRED`` to the
flush (the port's ``ResolveOutcome``; see ``SqlTx.resolve_transaction``); a batch whose deferred
resolutions lost a race with another broker runs again with each resolution checked as it is made.  Any other
failure aborts the batch; its units are then run one per transaction, so only the unit that fails
again is answered with the failure.  Units that lost a race with another
broker (a unique key, a deadlock) are retried on their own a few times.

A batch that cannot get a connection (PostgreSQL's primary is down, or being replaced by its
standby) is answered 503 ``STORE_UNAVAILABLE`` whole, at once: running its units one by one would
only try to connect again for each.  The outage is logged twice, when it begins and when a commit
succeeds again (how long, how many requests were refused), not once per request.  A batch whose
connection dies in its commit may have been committed (the standby had it): its units run again
on a fresh connection, where a send or a half is found a duplicate and a commit a repeat.  Its
signed units' nonces went into that commit too: on PostgreSQL a re-run that finds a unit's nonce
stored by the transaction an earlier attempt of its own stored it under (``_Job.prior``) runs the
unit again rather than answering 401 ``NONCE_REPLAYED``; any other stored nonce is a replay.

**Under flush: sync** the writer's commits do not wait for the disk (SQLite
``synchronous=NORMAL``, PostgreSQL ``synchronous_commit = off``) and the writer hands each
committed batch to a flusher thread, which makes the store's log durable once for every batch
waiting (``syncer``: :class:`~broker_service.store.engine.WalSync` fsyncs SQLite's WAL,
:class:`~broker_service.store.engine.PgFlush` commits a transaction of its own synchronously) and
only then answers them, in commit order, while the writer already runs the next batch: the wait
for the disk (and for PostgreSQL's synchronous standby) no longer holds the writer, and a batch's
answer still waits for its commit to be durable.  At most ``_AHEAD`` committed batches wait for
the flusher; beyond that the writer waits too, and its queue fills (429 BUSY) as it did when the
commit itself waited.  A sync that fails answers its batches 503 ``STORE_UNAVAILABLE``.  On
SQLite every later one fails too (what the kernel dropped cannot be told), until the broker is
restarted; on PostgreSQL the next sync connects again, and a batch is answered only if that sync
covers it (:meth:`LogSync.server <broker_service.store.engine.LogSync.server>`: the writer's
connection was on the same server, and the sync's connection was made before the batch began,
so before its commit -- see ``PgFlush``), or else 503, error answers too (one may rest on a read
of a commit that was lost).  ``stop`` waits for each thread 30 s at most: one stuck on the store
(a synchronous standby gone) is left behind and logged, never waited for without end.

The writer counts its commits and their units (``batches``, ``units``, read at scrape time) and
calls ``on_commit(seconds, units)`` after each one, if set: how the app times commits without the
store knowing of metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError

from broker_service.domain.errors import Busy, DomainError, InvalidRequest, NotReady
from broker_service.domain.ports.nonces import NonceKey, replayed_error
from broker_service.domain.ports.store import Command
from broker_service.store.engine import Covered, FlushNotAllowed, LogSync
from broker_service.store.failures import (
    driver_message,
    failures,
    store_unavailable,
    unavailable,
    with_reference,
)
from broker_service.store.sqltx import ResolutionRace, SqlTx

log = logging.getLogger("halfmq.store.writer")

_RETRIES = 3
# Committed batches that may wait for the flusher before the writer waits too.
_AHEAD = 8
# How long stop() waits for each of its threads.
_STOP_SECONDS = 30.0
# How long the flusher waits for a batch before it checks that its sync still works.
_IDLE_SECONDS = 10.0
# How often a sync that keeps failing is logged again.
_REMIND_SECONDS = 60.0
# What a client refused because the broker's role may not flush is told to pass on: fixed words
# that name no role (the log has the driver's message).
_FLUSH_HINT = (
    "the broker may not make its log durable: GRANT EXECUTE ON FUNCTION pg_logical_emit_message "
    "to its role, or run with flush: async"
)


@dataclass(slots=True)
class _Job:
    unit: Callable[[SqlTx], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    read_ahead: Sequence[str] = ()  # the command's transaction_ids
    nonce: NonceKey | None = None
    sent_ahead: Sequence[str] = ()  # the command's dedup_keys
    # PostgreSQL: the transaction id an attempt inserted this job's nonce under.  If that
    # attempt's COMMIT was lost with its connection and did land, a re-run finds the nonce stored
    # by that transaction: its own, not a replay's.
    prior: str | None = None
    ok: bool = False
    value: Any = None


_STOP = object()


class GroupCommitWriter:
    def __init__(
        self,
        engine: Engine,
        *,
        batch_max: int = 512,
        queue_max: int = 20_000,
        syncer: LogSync | Callable[[], None] | None = None,
    ) -> None:
        """``queue_max``: requests waiting for a commit beyond which the broker answers 429 BUSY;
        ``syncer``: makes what was committed durable (the engine's commits do not), called by a
        flusher thread before the batches it covers are answered (a plain callable covers every
        commit made before it; a :class:`LogSync` says what it covers)."""
        self.engine = engine
        self._syncer = syncer
        self._server_of = syncer.server if isinstance(syncer, LogSync) else None
        self._server: object = None  # server_of(self._conn)
        # The last batch run: when it began (time.monotonic(), no later than its commit, which
        # is what a sync's Covered.since is compared with) and the server it ran on (kept when a
        # failure drops the connection: the failure's answer is the batch's, on that server).
        self._began = 0.0
        self._ran_on: object = None
        # Committed batches waiting for the sync: (batch, server, when committed).
        self._synced: queue.Queue[Any] = queue.Queue(maxsize=_AHEAD)
        self._flusher: threading.Thread | None = None
        self.batch_max = batch_max
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_max)
        self._thread: threading.Thread | None = None
        # The writer thread's own connection, kept between batches: a pool checkout and check-in
        # per batch was a large share of the writer's time (bench/README.md, "Figures, second
        # round").  Dropped after any failure.
        self._conn: Connection | None = None
        self.batches = 0
        self.units = 0
        # Called in the writer thread after each commit: (seconds from begin to commit, units).
        self.on_commit: Callable[[float, int], None] | None = None
        self._outage = _outage()

    def start(self) -> None:
        if isinstance(self._syncer, LogSync):
            try:  # before the first commit, or that commit could not be covered
                self._syncer.connect()
            except Exception as exc:
                log.warning("the store's log sync could not connect yet: %s", driver_message(exc))
        if self._syncer is not None:
            self._flusher = threading.Thread(
                target=self._flush_loop, name="halfmq-flusher", daemon=True
            )
            self._flusher.start()
        self._thread = threading.Thread(target=self._run, name="halfmq-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the writer, then the flusher, after what they hold (30 s each at most: a thread
        stuck on the store -- a synchronous standby gone, say -- is left behind, logged)."""
        if self._thread is not None:
            _stop_thread(self._thread, self._queue)
            self._thread = None
        if self._flusher is not None:  # after the writer: every batch it committed is answered
            _stop_thread(self._flusher, self._synced)
            self._flusher = None

    def submit(
        self, unit: Command[Any] | Callable[[SqlTx], Any], nonce: NonceKey | None = None
    ) -> asyncio.Future[Any]:
        """Queue a unit of work, planned from what its command says: the transactions it will
        look up (``transaction_ids``; see ``SqlTx.read_ahead``), the dedup keys it will look for
        (``dedup_keys``; see ``SqlTx.read_ahead_sent``) and the signed request's ``nonce``,
        remembered before the unit runs (refused if seen).  A bare function names nothing ahead;
        ``nonce`` is its nonce."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if isinstance(unit, Command):
            job = _Job(
                unit,
                future,
                loop,
                unit.transaction_ids,
                unit.nonce if nonce is None else nonce,
                unit.dedup_keys,
            )
        else:
            job = _Job(unit, future, loop, (), nonce)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise Busy("the broker's write queue is full; retry later") from None
        return future

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            self._drop_connection()

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch, stop = _drain(self._queue, first, self.batch_max)
            self._execute(batch)
            if stop:
                return

    def _execute(self, batch: list[_Job]) -> None:
        try:
            try:
                self._run_batch(batch)
            except (ResolutionRace, _NonceSeen):
                # Another broker resolved a transaction this batch meant to, or a nonce of the
                # batch was seen before: the batch again, each resolution checked as it is made
                # (see SqlTx.resolve_transaction) and each nonce on its own.
                self._run_batch(batch, careful=True)
        except _Unreachable as exc:
            self._refuse(batch, exc.error)
            return
        except Exception as exc:
            if len(batch) > 1:
                log.info(
                    "batch of %d failed (%s); running its units one by one",
                    len(batch),
                    driver_message(exc),
                )
            unreachable: DBAPIError | None = None
            for job in batch:
                if unreachable is not None:  # an earlier unit found the store unreachable
                    self._refuse([job], unreachable)
                else:
                    unreachable = self._run_alone(job, exc)
            return
        self._answer(batch)

    def _run_batch(self, batch: list[_Job], *, careful: bool = False) -> None:
        conn = self._connection()
        self._began, self._ran_on = time.monotonic(), self._server
        began = time.perf_counter()
        try:
            with conn.begin():
                # Resolutions wait for the flush only where a race they lose can be run again.
                tx = SqlTx(conn, defer_resolutions=not careful and len(batch) > 1)
                wanted = [t for job in batch for t in job.read_ahead]
                if len(wanted) > 1:  # one lookup for all instead of one round trip each
                    tx.read_ahead(wanted)
                sent = [k for job in batch for k in job.sent_ahead]
                if len(sent) > 1:  # the same for the earlier sends halves and sends look for
                    tx.read_ahead_sent(sent)
                replayed = _replayed(tx, batch, exact=careful)
                for job in batch:
                    if id(job) in replayed:
                        job.value, job.ok = replayed_error(job.nonce), False
                        continue
                    mark = tx.mark()
                    try:
                        job.value, job.ok = job.unit(tx), True
                    except DomainError as error:
                        tx.rollback_to(mark)
                        job.value, job.ok = error, False
                tx.flush()
        except (ResolutionRace, _NonceSeen):
            raise  # rolled back; the connection is sound
        except BaseException:
            self._drop_connection()  # the next try starts on a fresh one
            raise
        self.batches += 1
        self.units += len(batch)
        self._outage.over()
        hook = self.on_commit
        if hook is not None:
            _report(hook, time.perf_counter() - began, len(batch))

    def _connection(self) -> Connection:
        """The writer's connection, made now if it has none; :class:`_Unreachable` if it cannot
        be made (nothing ran: the units may be refused without trying them one by one)."""
        if self._conn is None:
            try:
                conn = self.engine.connect()
            except DBAPIError as exc:
                raise _Unreachable(exc) from exc
            if self._server_of is not None:
                try:
                    self._server = self._server_of(conn)
                except DBAPIError as exc:
                    with contextlib.suppress(Exception):
                        conn.close()
                    raise _Unreachable(exc) from exc
            self._conn = conn
        return self._conn

    def _refuse(self, batch: list[_Job], error: DBAPIError) -> None:
        """Answer every unit 503: the store cannot be reached (logged once per outage, with the
        reference its refusals name)."""
        message = driver_message(error)
        if self._outage.failed(with_reference(message), len(batch)):
            failures.noted(failures.reference(message))
        for job in batch:
            job.value, job.ok = store_unavailable(error), False
        self._answer(batch)

    def _drop_connection(self) -> None:
        conn, self._conn, self._server = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _run_alone(self, job: _Job, first_error: Exception) -> DBAPIError | None:
        """Run one unit in a transaction of its own (a few times if it loses races); the
        driver's error when no connection could be made (the unit is refused)."""
        error: Exception = first_error
        for _ in range(_RETRIES):
            try:
                self._run_batch([job], careful=True)
            except _Unreachable as exc:
                self._refuse([job], exc.error)
                return exc.error
            except DataError as exc:
                # The store refused a value (PostgreSQL: a NUL in text, a number out of range):
                # the request is wrong, and trying again cannot help.
                job.value, job.ok = _refused(exc), False
                break
            except (IntegrityError, DBAPIError) as exc:
                error = exc
                continue
            except Exception as exc:
                job.value, job.ok = exc, False
                break
            else:
                break
        else:
            log.error("unit failed %d times: %s", _RETRIES, driver_message(error))
            job.value, job.ok = _translate(error), False
        self._answer([job])
        return None

    def _answer(self, batch: list[_Job]) -> None:
        """Answer the batch now, or once the flusher has made its commit durable."""
        if self._syncer is None:
            _deliver(batch)
        else:  # the server its commit was made on (None if none was), and a time before it
            self._synced.put((batch, self._ran_on, self._began))

    def _flush_loop(self) -> None:
        syncer = self._syncer
        assert syncer is not None
        syncs = _sync_failures()
        while True:
            try:
                first = self._synced.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                if isinstance(syncer, LogSync):
                    syncer.keep_alive()
                continue
            if first is _STOP:
                return
            committed, stop = _drain(self._synced, first, None)
            # A batch refused whole (the store unreachable) has nothing to make durable; any other
            # answer, an error too, may rest on what a commit not yet durable wrote.
            if not all(_refused_whole(batch) for batch, _server, _at in committed):
                try:
                    covered = syncer()  # one sync for every batch committed before it began
                except Exception as exc:
                    why = f"its log could not be made durable: {driver_message(exc)}"
                    if syncs.failed(with_reference(why)):
                        failures.noted(failures.reference(why))
                    _fail(committed, why, _FLUSH_HINT if isinstance(exc, FlushNotAllowed) else "")
                else:
                    syncs.over()
                    if covered is not None:
                        _uncovered(committed, covered)
            for batch, _server, _at in committed:
                _deliver(batch)
            if stop:
                return


def _stop_thread(thread: threading.Thread, source: queue.Queue[Any]) -> None:
    """Queue a ``_STOP`` for ``thread`` and wait for it to end, neither for more than
    ``_STOP_SECONDS`` (a full queue waits for the thread to take from it)."""
    deadline = time.monotonic() + _STOP_SECONDS
    with contextlib.suppress(queue.Full):
        source.put(_STOP, timeout=_STOP_SECONDS)
    thread.join(timeout=max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        log.warning("%s did not stop within %ss; leaving it behind", thread.name, _STOP_SECONDS)


def _refused_whole(batch: list[_Job]) -> bool:
    return all(not job.ok and isinstance(job.value, NotReady) for job in batch)


def _fail(committed: list[tuple[list[_Job], object, float]], why: str, hint: str = "") -> None:
    """Answer 503 every unit of the batches: what their commit wrote (or an error answer read)
    is not known durable; a retry gets the answer again."""
    failed = unavailable(why, hint)
    for batch, _server, _at in committed:
        for job in batch:
            job.value, job.ok = failed, False


def _uncovered(committed: list[tuple[list[_Job], object, float]], covered: Covered) -> None:
    """Refuse the batches a sync did not cover: committed on another server than the sync ran on
    (a failover in between), or before the sync's connection was made (the server may have
    restarted since, losing them).  Their error answers too: a 409 "already committed" may rest
    on a commit that was lost.  A batch refused whole wrote and read nothing."""
    lost = [
        item
        for item in committed
        if not _refused_whole(item[0]) and (item[1] != covered.server or item[2] < covered.since)
    ]
    if lost:
        log.warning(
            "%d committed batches were not confirmed durable (the store's connection changed "
            "before their sync); answering 503",
            len(lost),
        )
        _fail(lost, "the connection to it changed before the write was confirmed durable")


def _drain(source: queue.Queue[Any], first: Any, limit: int | None) -> tuple[list[Any], bool]:
    """``first`` and what else waits in ``source`` now, ``limit`` items at most (None: all), up
    to a ``_STOP``: the items, and whether a ``_STOP`` was taken (the caller stops after them)."""
    items = [first]
    while limit is None or len(items) < limit:
        try:
            item = source.get_nowait()
        except queue.Empty:
            break
        if item is _STOP:
            return items, True
        items.append(item)
    return items, False


def _deliver(batch: list[_Job]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
    for job in batch:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, jobs in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed while we committed
            loop.call_soon_threadsafe(_settle, jobs)


class _Unreachable(Exception):
    """No connection to the store could be made (``error``: the driver's)."""

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


class _Episode:
    """One failure that lasts -- the store unreachable, its log not made durable -- told in a few
    lines, not one for each of the thousands of refusals between (a PostgreSQL failover is a few
    seconds of them; a revoked privilege refuses every write): ``began`` (at ``level``, with the
    reason) at the first, ``still`` (with the count, the seconds and the reason) at most every
    ``_REMIND_SECONDS`` if given, and ``ended`` (a WARNING with the seconds and the count) when
    it is over."""

    def __init__(self, level: int, began: str, ended: str, still: str | None = None) -> None:
        self.level, self.began, self.ended, self.still = level, began, ended, still
        self.since: float | None = None
        self.count = 0
        self.said_at = 0.0

    def failed(self, reason: str, count: int = 1) -> bool:
        """Count a failure; whether ``reason`` was logged (the first, or a reminder)."""
        now = time.monotonic()
        self.count += count
        if self.since is None:
            self.since = self.said_at = now
            log.log(self.level, self.began, reason)
            return True
        if self.still is not None and now - self.said_at >= _REMIND_SECONDS:
            self.said_at = now
            log.log(self.level, self.still, self.count, now - self.since, reason)
            return True
        return False

    def over(self) -> None:
        if self.since is not None:
            log.warning(self.ended, time.monotonic() - self.since, self.count)
            self.since, self.count = None, 0


def _outage() -> _Episode:
    """The writer's store unreachable: each refused unit counted."""
    return _Episode(
        logging.WARNING,
        "the store cannot be reached; answering 503 STORE_UNAVAILABLE until it can: %s",
        "the store is reachable again after %.1f s; %d requests were refused meanwhile",
    )


def _sync_failures() -> _Episode:
    """The flusher's syncs failing: each failed sync counted."""
    return _Episode(
        logging.ERROR,
        "the store's log could not be made durable; refusing: %s",
        "the store's log is made durable again after %.1f s; %d syncs failed meanwhile",
        still="the store's log still cannot be made durable (%d syncs failed in %.0f s); "
        "refusing: %s",
    )


class _NonceSeen(Exception):
    """A nonce of the batch was seen before: run it again with ``exact`` nonces."""


def _replayed(tx: SqlTx, batch: list[_Job], *, exact: bool) -> set[int]:
    """Remember the batch's nonces in one statement; the jobs (``id``) whose nonce was seen.
    Not ``exact``: :class:`_NonceSeen` when any was, without telling which.  A job whose nonce an
    earlier attempt of its own stored (``_Job.prior``) is not refused."""
    signed = [(job, job.nonce) for job in batch if job.nonce is not None]
    if not signed:
        return set()
    if not exact:
        if tx.remember_new_nonces([nonce for _, nonce in signed]):
            for job, _ in signed:
                job.prior = tx.nonce_xid
            return set()
        raise _NonceSeen
    fresh = tx.remember_nonces([nonce for _, nonce in signed])
    seen = []
    for (job, nonce), new in zip(signed, fresh, strict=True):
        if new:
            job.prior = tx.nonce_xid
        else:
            seen.append((job, nonce))
    # A nonce seen before is a replay -- unless an earlier attempt of this job stored it, in a
    # transaction whose COMMIT was lost with its connection but landed (a failover): the job then
    # runs again, where a send or a half is found a duplicate and a commit a repeat.
    replayed = set()
    for job, nonce in seen:
        if job.prior is None or not tx.nonces_inserted_by([nonce], job.prior)[0]:
            replayed.add(id(job))
    return replayed


def _report(hook: Callable[[float, int], None], seconds: float, units: int) -> None:
    """The commit is made: a failing hook must not make the writer run its units again."""
    try:
        hook(seconds, units)
    except Exception:
        log.exception("the writer's on_commit hook failed")


def _settle(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.done():
            continue
        if job.ok:
            job.future.set_result(job.value)
        else:
            job.future.set_exception(job.value)


def _refused(error: DataError) -> InvalidRequest:
    reason = str(error.orig).splitlines()[0] if error.orig is not None else "invalid value"
    return InvalidRequest(f"the store refused a value: {reason}", code="INVALID_VALUE")


def _translate(error: Exception) -> Exception:
    if isinstance(error, DomainError):
        return error
    if isinstance(error, DBAPIError) and not isinstance(error, IntegrityError):
        return store_unavailable(error)
    return error
