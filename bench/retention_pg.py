"""Retention on PostgreSQL: DELETE in batches from the schema's ``messages`` against hourly
partitions dropped whole, under a steady insert load, in one run.

    python bench/retention_pg.py [--rows 2000000] [--hours 48] [--retain 24] [--seconds 30]

It creates a scratch database of its own (``halfmq_bench_retention``, dropped at the end, even on
error) on the machine's PostgreSQL (``HALFMQ_BENCH_PG_ADMIN``, default the ``postgres`` database on
127.0.0.1) and builds two ``messages`` tables in it, one after the other:

* ``plain.messages``   the broker's table as ``broker_service.store.schema`` defines it (SQLAlchemy's
                       DDL: indexes and unique constraints), with its ``queues`` table;
* ``parted.messages``  the same columns and indexes, ``PARTITION BY RANGE (stored_at)``, one
                       partition an hour.  The script first asks PostgreSQL for the schema's
                       global uniqueness (``id`` alone, (topic, queue_id, queue_offset),
                       ``dedup_key``) and prints its refusals -- a unique index of a partitioned
                       table must contain the partition key -- then stores two rows an hour apart
                       with one ``dedup_key`` / one offset in each table, and prints the lock
                       each partition DDL takes on the parent (from ``pg_locks``).

Each is filled with ``--rows`` messages over ``--hours`` simulated hours (``stored_at`` spread up to
now) in 8 topics x 4 queues at dense offsets, half of them with a ``dedup_key`` (as the framework's
sends).  Then a writer thread inserts as fast as it can, as the broker's group commit does on
PostgreSQL (one transaction: the 32 queue rows locked in order, their next offsets moved,
``--batch`` rows by ``COPY``), alone and while a purger removes the oldest ``--hours - --retain``
hours, each purge raising the queues' ``min_offset`` past what it removed:

* plain    four shares of the hours: DELETE of each queue's offset prefix from min_offset
           (``--batch-small``, then ``--batch-mid`` rows a transaction), then DELETE by a
           ``stored_at`` range through its index across queues (``--batch-mid``, then
           ``--batch-large``), ``--pause-ms`` between batches; then the insert rate before and
           after a plain VACUUM, which runs (timed) beside the writer;
* parted   DROP of the oldest partitions then CREATE of one ahead each, and DETACH ...
           CONCURRENTLY then DROP, CREATE TABLE then ATTACH (the statements that do not take
           ACCESS EXCLUSIVE on the parent), ``--drop-pause`` between; then one DROP while a
           reader holds the table for ``--reader-hold`` s (a report, an export, pg_dump).

A phase ends when its share is purged or after ``--seconds``; the machine drifts, so the insert
baseline is the mean of a table's insert-alone phases.  Printed per phase: insert rows/s and its
ratio to the baseline, insert-transaction p50/p99/max, rows purged and purged/s, purge-transaction
p50/max, WAL written; then table and index sizes, live and dead rows and free space (pgstattuple)
after the fill, before and after the purge and around the VACUUM; a check that nothing older than
the cutoff or below a queue's min_offset is left; the broker's reads on both tables after their
purges (GET by msg_id, one message by offset, a consumer's read of 32 from an offset), timed in a
loop, with the index scans and planning time EXPLAIN shows; and a summary with, per purge, the
inserts it cost and the WAL it wrote per row it removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from sqlalchemy import Table, create_engine

from broker_service.store.schema import messages, metadata, queues

ADMIN = os.environ.get("HALFMQ_BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
DB = "halfmq_bench_retention"
HOUR = 3_600_000
TOPICS, QUEUES_PER_TOPIC = 8, 4
QUEUE_KEYS = [(f"bench-{t}", q) for t in range(TOPICS) for q in range(QUEUES_PER_TOPIC)]
ENCODING = "utf-8"
COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "msg_id",
    "dedup_key",
    "body",
    "encoding",
    "born_at",
    "stored_at",
)
Conn = psycopg.Connection[tuple[Any, ...]]


def connect(dsn: str, schema: str, autocommit: bool = False) -> Conn:
    return psycopg.connect(dsn, autocommit=autocommit, options=f"-c search_path={schema}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


# -- the two tables ------------------------------------------------------------------------------


def create_tables(dsn: str, schema: str, *tables: Table) -> None:
    """The schema's own DDL (SQLAlchemy's) for ``tables``, in ``schema``."""
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    try:
        with engine.begin() as conn:
            translated = conn.execution_options(schema_translate_map={None: schema})
            metadata.create_all(translated, tables=list(tables))
    finally:
        engine.dispose()


def _column_ddl() -> str:
    dialect = create_engine("postgresql+psycopg://").dialect  # never connects
    parts = []
    for column in messages.columns:
        if column.name == "id":
            parts.append("id BIGSERIAL NOT NULL")  # an identity column needs PostgreSQL 17 here
            continue
        ddl = f"{column.name} {column.type.compile(dialect=dialect)}"
        if not column.nullable:
            ddl += " NOT NULL"
        default = column.server_default
        if default is not None:
            ddl += f" DEFAULT {default.arg.text}"  # type: ignore[attr-defined]
        parts.append(ddl)
    return ",\n  ".join(parts)


# What the plain table enforces across the whole table, tried on the partitioned one.
GLOBAL_UNIQUES = [
    ("id alone (the primary key)", "ALTER TABLE messages ADD PRIMARY KEY (id)"),
    (
        "(topic, queue_id, queue_offset)",
        "ALTER TABLE messages ADD CONSTRAINT uq_messages_offset UNIQUE (topic, queue_id, queue_offset)",
    ),
    (
        "dedup_key (partial)",
        "CREATE UNIQUE INDEX uq_messages_dedup_key ON messages (dedup_key)"
        " WHERE dedup_key IS NOT NULL",
    ),
]

# What the partitioned table gets instead: the same indexes, none of them unique across partitions.
PARTED_INDEXES = [
    "ALTER TABLE messages ADD CONSTRAINT pk_messages PRIMARY KEY (id, stored_at)",
    "CREATE INDEX ix_messages_offset ON messages (topic, queue_id, queue_offset)",
    "CREATE INDEX ix_messages_msg_id ON messages (msg_id)",
    "CREATE INDEX ix_messages_dedup_key ON messages (dedup_key) WHERE dedup_key IS NOT NULL",
    "CREATE INDEX ix_messages_transaction_id ON messages (transaction_id)"
    " WHERE transaction_id IS NOT NULL",
    "CREATE INDEX ix_messages_stored_at ON messages (stored_at)",
    "CREATE INDEX ix_messages_due ON messages (topic, deliver_at)"
    " WHERE released_at IS NULL AND deliver_at IS NOT NULL",
]


def create_parted(dsn: str, first_hour: int, last_hour: int) -> list[tuple[str, str]]:
    """``parted.messages`` with a partition per hour from ``first_hour`` to ``last_hour`` (epoch
    hours, inclusive); the global uniqueness PostgreSQL refused, with its reason."""
    refused = []
    with connect(dsn, "parted", autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE messages (\n  {_column_ddl()}\n) PARTITION BY RANGE (stored_at)"
        )
        for what, ddl in GLOBAL_UNIQUES:
            try:
                conn.execute(ddl)
            except psycopg.Error as exc:
                refused.append((what, str(exc).splitlines()[0]))
            else:
                refused.append((what, "accepted (unexpected)"))
        for ddl in PARTED_INDEXES:
            conn.execute(ddl)
        for hour in range(first_hour, last_hour + 1):
            conn.execute(partition_ddl(hour))
    create_tables(dsn, "parted", queues)
    return refused


def partition_name(hour: int) -> str:
    return f"messages_h{hour}"


def partition_ddl(hour: int) -> str:
    return (
        f"CREATE TABLE {partition_name(hour)} PARTITION OF messages"
        f" FOR VALUES FROM ({hour * HOUR}) TO ({(hour + 1) * HOUR})"
    )


FILL = """
INSERT INTO messages (topic, queue_id, queue_offset, msg_id, dedup_key, body, encoding,
                      born_at, stored_at)
SELECT 'bench-' || (i %% {queues}) / {per_topic}, (i %% {queues}) %% {per_topic}, i / {queues}, m,
       CASE WHEN (i / {queues}) %% 2 = 0 THEN m END, %(body)s, 'utf-8', s, s
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS i,
     LATERAL (SELECT %(t0)s::bigint + i * %(span)s::bigint / %(n)s::bigint AS s) AS st,
     LATERAL (SELECT lpad(upper(to_hex(s)), 12, '0') || upper(substr(md5(i::text), 1, 20)) AS m)
       AS mm
""".format(queues=len(QUEUE_KEYS), per_topic=QUEUES_PER_TOPIC)


def fill(dsn: str, schema: str, rows: int, t0: int, span: int, body: bytes) -> float:
    """``rows`` messages, message i in queue i % 32 at offset i / 32, stored at t0 + i * span / rows;
    the queues' next offsets; ANALYZE; CHECKPOINT.  Seconds taken."""
    began = time.perf_counter()
    with connect(dsn, schema) as conn:
        step = 250_000
        for lo in range(0, rows, step):
            params = {"body": body, "lo": lo, "hi": min(rows, lo + step), "t0": t0}
            conn.execute(FILL, params | {"span": span, "n": rows})
            conn.commit()
        width = len(QUEUE_KEYS)
        per_queue = [(rows - k + width - 1) // width for k in range(width)]
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO queues (topic, queue_id, next_offset, min_offset) VALUES (%s, %s, %s, 0)",
                [(t, q, n) for (t, q), n in zip(QUEUE_KEYS, per_queue, strict=True)],
            )
        conn.commit()
    with connect(dsn, schema, autocommit=True) as conn:
        conn.execute("ANALYZE messages")
        conn.execute("ANALYZE queues")
        conn.execute("CHECKPOINT")
    return time.perf_counter() - began


# -- the writer: the broker's group commit on PostgreSQL -----------------------------------------

LOCK_QUEUES = "SELECT topic, queue_id, next_offset FROM queues ORDER BY topic, queue_id FOR UPDATE"
MOVE_QUEUES = (
    "UPDATE queues SET next_offset = v.next_offset"
    " FROM unnest(%s::varchar[], %s::int[], %s::bigint[]) AS v(topic, queue_id, next_offset)"
    " WHERE queues.topic = v.topic AND queues.queue_id = v.queue_id"
)
COPY = f"COPY messages ({', '.join(COLUMNS)}) FROM STDIN"


class Writer(threading.Thread):
    """Inserts ``batch`` rows a transaction, round-robin over the 32 queues, until stopped."""

    def __init__(self, dsn: str, schema: str, batch: int, body: bytes) -> None:
        super().__init__(daemon=True)
        self.dsn, self.schema, self.batch, self.body = dsn, schema, batch, body
        self.halt = threading.Event()
        self.latencies: list[float] = []
        self.rows = 0
        self.seconds = 0.0
        self.error: BaseException | None = None
        self._seed = random.getrandbits(32)
        self._n = 0
        self._turn = 0

    def run(self) -> None:
        try:
            with connect(self.dsn, self.schema) as conn:
                began = time.perf_counter()
                while not self.halt.is_set():
                    t = time.perf_counter()
                    self._commit(conn)
                    self.latencies.append(time.perf_counter() - t)
                    self.rows += self.batch
                self.seconds = time.perf_counter() - began
        except BaseException as exc:
            self.error = exc

    def _commit(self, conn: Conn) -> None:
        now = now_ms()
        width = len(QUEUE_KEYS)
        picks = [(self._turn + k) % width for k in range(self.batch)]
        self._turn = (self._turn + self.batch) % width
        with conn.transaction(), conn.cursor() as cur:
            nexts = {(t, q): o for t, q, o in cur.execute(LOCK_QUEUES)}
            offsets = [nexts[key] for key in QUEUE_KEYS]
            rows = []
            for k in picks:
                topic, queue_id = QUEUE_KEYS[k]
                self._n += 1
                msg_id = f"{now:012X}{self._seed:08X}{self._n:012X}"
                dedup = msg_id if offsets[k] % 2 == 0 else None
                rows.append(
                    (topic, queue_id, offsets[k], msg_id, dedup, self.body, ENCODING, now, now)
                )
                offsets[k] += 1
            cur.execute(
                MOVE_QUEUES,
                ([t for t, _ in QUEUE_KEYS], [q for _, q in QUEUE_KEYS], offsets),
            )
            with cur.copy(COPY) as copy:
                for row in rows:
                    copy.write_row(row)

    def stop(self) -> None:
        self.halt.set()
        self.join()
        if self.error is not None:
            raise RuntimeError(f"writer failed: {self.error!r}") from self.error


# -- purgers -------------------------------------------------------------------------------------


@dataclass
class Purge:
    rows: int = 0
    txns: list[float] = field(default_factory=list)
    seconds: float = 0.0
    done: bool = False  # the whole share was purged (else the phase's time ran out)


def _timed(purge: Purge) -> Callable[[], contextlib.AbstractContextManager[None]]:
    @contextlib.contextmanager
    def timer() -> Iterator[None]:
        t = time.perf_counter()
        yield
        purge.txns.append(time.perf_counter() - t)

    return timer


DELETE_PREFIX = (
    "DELETE FROM messages WHERE topic = %s AND queue_id = %s"
    " AND queue_offset >= %s AND queue_offset < %s AND stored_at < %s"
)
SET_MIN = "UPDATE queues SET min_offset = %s WHERE topic = %s AND queue_id = %s"


def purge_by_offset(
    dsn: str, batch: int, cutoff: int, pause: float, deadline: float, halt: threading.Event
) -> Purge:
    """Per queue, round-robin: the next ``batch`` offsets from min_offset that are older than
    ``cutoff``, and min_offset raised past them, one transaction; a queue is done at a short batch
    (stored_at grows with the offset in a queue, so what is older is a prefix)."""
    purge = Purge()
    timer = _timed(purge)
    began = time.perf_counter()
    with connect(dsn, "plain") as conn:
        lows = {
            (t, q): m for t, q, m in conn.execute("SELECT topic, queue_id, min_offset FROM queues")
        }
        conn.commit()
        active = list(QUEUE_KEYS)
        while active and time.perf_counter() < deadline and not halt.is_set():
            for key in list(active):
                topic, queue_id = key
                low = lows[key]
                with timer(), conn.transaction():
                    cur = conn.execute(DELETE_PREFIX, (topic, queue_id, low, low + batch, cutoff))
                    deleted = cur.rowcount
                    if deleted:
                        conn.execute(SET_MIN, (low + deleted, topic, queue_id))
                purge.rows += deleted
                lows[key] = low + deleted
                if deleted < batch:
                    active.remove(key)
                time.sleep(pause)
                if time.perf_counter() >= deadline:
                    break
        purge.done = not active
    purge.seconds = time.perf_counter() - began
    return purge


# The batch's end: the stored_at of the row ``batch`` places on (fewer rows go when several share
# it).  Not ``DELETE ... WHERE id IN (SELECT id ... ORDER BY stored_at LIMIT n)``: from some n on
# (10,000 of 275,000 rows here) the planner hashes the subquery and scans the whole table.
BATCH_END = (
    "SELECT stored_at FROM messages WHERE stored_at >= %s AND stored_at < %s"
    " ORDER BY stored_at OFFSET %s LIMIT 1"
)
DELETE_RANGE = (
    "DELETE FROM messages WHERE stored_at >= %s AND stored_at < %s"
    " RETURNING topic, queue_id, queue_offset"
)
LOCK_SOME_QUEUES = (
    "SELECT 1 FROM queues WHERE (topic, queue_id) IN"
    " (SELECT * FROM unnest(%s::varchar[], %s::int[])) ORDER BY topic, queue_id FOR UPDATE"
)
RAISE_MINS = (
    "UPDATE queues SET min_offset = greatest(min_offset, v.m)"
    " FROM unnest(%s::varchar[], %s::int[], %s::bigint[]) AS v(topic, queue_id, m)"
    " WHERE queues.topic = v.topic AND queues.queue_id = v.queue_id"
)


def purge_by_stored_at(
    dsn: str, batch: int, cutoff: int, pause: float, deadline: float, halt: threading.Event
) -> Purge:
    """About ``batch`` of the oldest rows through the stored_at index, whatever their queue, and
    each queue's min_offset raised past what went (queues locked in order), one transaction.  The
    first batch starts at stored_at 0 and walks what earlier phases deleted; later ones at the
    last end."""
    purge = Purge()
    timer = _timed(purge)
    began = time.perf_counter()
    low = 0
    with connect(dsn, "plain") as conn:
        while time.perf_counter() < deadline and not halt.is_set():
            with timer(), conn.transaction():
                end = conn.execute(BATCH_END, (low, cutoff, batch)).fetchone()
                high = max(low + 1, end[0]) if end is not None else cutoff
                gone = conn.execute(DELETE_RANGE, (low, high)).fetchall()
                firsts: dict[tuple[str, int], int] = {}
                for topic, queue_id, offset in gone:
                    key = (topic, queue_id)
                    firsts[key] = max(firsts.get(key, 0), offset + 1)
                if firsts:
                    keys = sorted(firsts)
                    topics, ids = [t for t, _ in keys], [q for _, q in keys]
                    conn.execute(LOCK_SOME_QUEUES, (topics, ids))
                    conn.execute(RAISE_MINS, (topics, ids, [firsts[k] for k in keys]))
            purge.rows += len(gone)
            low = high
            if end is None:
                purge.done = True
                break
            time.sleep(pause)
    purge.seconds = time.perf_counter() - began
    return purge


PARTITION_ENDS = (
    "SELECT q.topic, q.queue_id, (SELECT max(m.queue_offset) FROM {partition} AS m"
    " WHERE m.topic = q.topic AND m.queue_id = q.queue_id) FROM queues AS q"
    " ORDER BY q.topic, q.queue_id"
)


def purge_partitions(
    dsn: str,
    hours: Sequence[int],
    ahead: Iterator[int],
    counts: dict[int, int],
    concurrently: bool,
    pause: float,
    deadline: float,
    halt: threading.Event,
) -> Purge:
    """For each hour, each statement a transaction of its own: the queues' min_offset raised past
    the partition's last offsets (32 index probes of the partition), then DROP it and CREATE the
    next one ahead as a partition (both take ACCESS EXCLUSIVE on the parent), or, concurrently,
    DETACH ... CONCURRENTLY then DROP, and CREATE a table then ATTACH it (SHARE UPDATE EXCLUSIVE)."""
    purge = Purge()
    timer = _timed(purge)
    began = time.perf_counter()
    with connect(dsn, "parted", autocommit=True) as conn:
        for hour in hours:
            if time.perf_counter() >= deadline or halt.is_set():
                break
            name, new = partition_name(hour), next(ahead)
            with timer():
                ends = [
                    (t, q, m + 1)
                    for t, q, m in conn.execute(PARTITION_ENDS.format(partition=name))
                    if m is not None
                ]
                with conn.transaction():
                    topics, ids = [t for t, _, _ in ends], [q for _, q, _ in ends]
                    conn.execute(LOCK_SOME_QUEUES, (topics, ids))
                    conn.execute(RAISE_MINS, (topics, ids, [m for _, _, m in ends]))
                if concurrently:
                    conn.execute(f"ALTER TABLE messages DETACH PARTITION {name} CONCURRENTLY")
                    conn.execute(f"DROP TABLE {name}")
                    for sql in attach_ddl(new):
                        conn.execute(sql)
                else:
                    conn.execute(f"DROP TABLE {name}")
                    conn.execute(partition_ddl(new))
            purge.rows += counts[hour]
            time.sleep(pause)
        else:
            purge.done = True
    purge.seconds = time.perf_counter() - began
    return purge


def attach_ddl(hour: int) -> list[str]:
    name, low, high = partition_name(hour), hour * HOUR, (hour + 1) * HOUR
    return [
        f"CREATE TABLE {name} (LIKE messages INCLUDING DEFAULTS)",
        # The partition's bound as a CHECK first, so that ATTACH needs no scan to prove it.
        f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound"
        f" CHECK (stored_at >= {low} AND stored_at < {high})",
        f"ALTER TABLE messages ATTACH PARTITION {name} FOR VALUES FROM ({low}) TO ({high})",
    ]


# -- measuring ------------------------------------------------------------------------------------


@dataclass
class Phase:
    label: str
    seconds: float
    inserted: int
    latencies: list[float]
    wal_bytes: int
    purge: Purge | None = None

    @property
    def rate(self) -> float:
        return self.inserted / self.seconds if self.seconds else 0.0


def wal_lsn(conn: Conn) -> str:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def wal_since(conn: Conn, lsn: str) -> int:
    row = conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (lsn,)
    ).fetchone()
    assert row is not None
    return int(row[0])


class Run:
    """One table's run: its phases and its sizes, printed at its end (progress on stderr)."""

    HEAD = (
        f"{'phase':<36}{'s':>6}{'inserts/s':>11}{'x alone':>8}{'txn p50':>9}{'p99':>7}"
        f"{'max ms':>8}{'purged':>12}{'purged/s':>10}{'purge txn p50':>15}{'max ms':>8}"
        f"{'WAL MB':>8}"
    )
    SIZES_HEAD = (
        f"{'when':<46}{'heap MB':>9}{'index MB':>10}{'live rows':>12}{'dead rows':>12}"
        f"{'free %':>8}{'dead %':>7}"
    )

    def __init__(
        self, schema: str, dsn: str, args: argparse.Namespace, body: bytes, monitor: Conn
    ) -> None:
        self.schema, self.dsn, self.args, self.body, self.monitor = schema, dsn, args, body, monitor
        self.phases: list[Phase] = []
        self.sizes: list[str] = []

    @property
    def alone(self) -> float:
        """The insert rate with nothing else running: the mean of the table's alone phases (the
        machine drifts by 10-20 % between phases of the same code)."""
        return statistics.fmean(p.rate for p in self.phases if p.purge is None)

    def phase(
        self,
        label: str,
        action: Callable[[float, threading.Event], Purge] | None = None,
        seconds: float | None = None,
    ) -> Phase:
        """The writer alone for ``seconds``, or while ``action(deadline, halt)`` runs (the phase
        is the action's time); a CHECKPOINT first so that no phase pays for another's pages."""
        print(f"  {self.schema}: {label} ...", file=sys.stderr, flush=True)
        self.monitor.execute("CHECKPOINT")
        lsn = wal_lsn(self.monitor)
        writer = Writer(self.dsn, self.schema, self.args.batch, self.body)
        writer.start()
        purge = None
        halt = threading.Event()
        try:
            if action is None:
                time.sleep(seconds if seconds is not None else self.args.seconds)
            else:
                purge = action(time.perf_counter() + self.args.seconds, halt)
        finally:
            halt.set()
            writer.stop()
        phase = Phase(label, writer.seconds, writer.rows, writer.latencies, 0, purge)
        phase.wal_bytes = wal_since(self.monitor, lsn)
        self.phases.append(phase)
        return phase

    def print_phases(self) -> None:
        print(self.HEAD)
        for phase in self.phases:
            self._print(phase)

    def _print(self, phase: Phase) -> None:
        lat = [x * 1000 for x in phase.latencies]
        line = (
            f"{phase.label:<36}{phase.seconds:>6.1f}{phase.rate:>11,.0f}"
            f"{phase.rate / self.alone:>8.2f}{pct(lat, 0.5):>9.1f}{pct(lat, 0.99):>7.1f}"
            f"{max(lat, default=0):>8.0f}"
        )
        purge = phase.purge
        if purge is None:
            line += " " * 22 + " " * 23
        else:
            txn = [x * 1000 for x in purge.txns]
            if purge.rows:
                mark = "" if purge.done else "*"
                line += f"{purge.rows:>11,}{mark:1}{purge.rows / purge.seconds:>10,.0f}"
            else:
                line += " " * 22
            line += f"{pct(txn, 0.5):>15.1f}{max(txn, default=0):>8.0f}"
        print(line + f"{phase.wal_bytes / 1e6:>8.0f}")

    def measure_sizes(self, when: str) -> tuple[float, int]:
        """A line of the sizes table; the heap MB and dead rows."""
        self.monitor.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(0.5)  # the writer's and purger's sessions flushed theirs as they closed
        heap, index, live, dead = sizes(self.monitor, self.schema)
        free = free_percent(self.monitor, self.schema) if self.schema == "plain" else ""
        self.sizes.append(f"{when:<46}{heap:>9,.0f}{index:>10,.0f}{live:>12,}{dead:>12,}{free}")
        return heap, dead

    def print_sizes(self) -> None:
        print(self.SIZES_HEAD)
        for line in self.sizes:
            print(line)


def sizes(conn: Conn, schema: str) -> tuple[float, float, int, int]:
    """Heap (with TOAST, FSM, VM) and index MB over every partition; live and dead tuples."""
    tables = (
        "SELECT relid FROM pg_partition_tree(%s::regclass) WHERE isleaf"
        if schema == "parted"
        else "SELECT %s::regclass AS relid"  # pg_partition_tree has no row for a plain table
    )
    row = conn.execute(
        f"SELECT sum(pg_table_size(relid)), sum(pg_indexes_size(relid)) FROM ({tables}) AS t",
        (f"{schema}.messages",),
    ).fetchone()
    assert row is not None
    stats = conn.execute(
        "SELECT coalesce(sum(n_live_tup), 0), coalesce(sum(n_dead_tup), 0)"
        " FROM pg_stat_user_tables WHERE schemaname = %s AND relname LIKE 'messages%%'",
        (schema,),
    ).fetchone()
    assert stats is not None
    return int(row[0]) / 2**20, int(row[1]) / 2**20, int(stats[0]), int(stats[1])


def free_percent(conn: Conn, schema: str) -> str:
    """The heap's free space (pgstattuple_approx; blank when the extension is not there)."""
    try:
        row = conn.execute(
            "SELECT round(approx_free_percent::numeric, 1), round(dead_tuple_percent::numeric, 1)"
            " FROM pgstattuple_approx(%s::regclass)",
            (f"{schema}.messages",),
        ).fetchone()
    except psycopg.Error:
        return "   n/a"
    assert row is not None
    return f"{row[0]:>6}{row[1]:>7}"


def check(conn: Conn, schema: str, cutoff: int) -> str:
    """That the purge did what retention promises: nothing older than the cutoff is left, nothing
    below a queue's min_offset, and each queue's first row is at its min_offset."""
    row = conn.execute(
        f"SELECT (SELECT count(*) FROM {schema}.messages WHERE stored_at < %s),"
        " count(*) FILTER (WHERE below > 0), count(*) FILTER (WHERE first <> q.min_offset)"
        f" FROM {schema}.queues AS q,"
        f" LATERAL (SELECT count(*) AS below FROM {schema}.messages AS m WHERE m.topic = q.topic"
        "   AND m.queue_id = q.queue_id AND m.queue_offset < q.min_offset) AS b,"
        f" LATERAL (SELECT min(queue_offset) AS first FROM {schema}.messages AS m"
        "   WHERE m.topic = q.topic AND m.queue_id = q.queue_id) AS f",
        (cutoff,),
    ).fetchone()
    assert row is not None
    return (
        f"check: {row[0]} rows older than the cutoff left; {row[1]} queues with rows below"
        f" min_offset; {row[2]} queues whose first row is not at min_offset"
    )


def probe(conn: Conn, schema: str) -> str:
    """Reads that start where the purge left dead index entries: the oldest row by stored_at, and
    the first offset of queue 0 (min(queue_offset) of one queue)."""
    out = []
    for sql in (
        f"SELECT stored_at FROM {schema}.messages ORDER BY stored_at LIMIT 1",
        f"SELECT min(queue_offset) FROM {schema}.messages WHERE topic = 'bench-0' AND queue_id = 0",
    ):
        t = time.perf_counter()
        conn.execute(sql).fetchall()
        out.append(f"{(time.perf_counter() - t) * 1000:,.1f} ms")
    return "oldest by stored_at " + out[0] + ", first offset of a queue " + out[1]


def parent_locks(
    dsn: str, statements: Sequence[tuple[str, Sequence[str]]]
) -> list[tuple[str, str]]:
    """The lock modes statements take on parted.messages, in a transaction rolled back."""
    found = []
    with connect(dsn, "parted") as conn:
        for what, sqls in statements:
            for sql in sqls:
                conn.execute(sql)
            modes = conn.execute(
                "SELECT string_agg(mode, ', ' ORDER BY mode) FROM pg_locks"
                " WHERE pid = pg_backend_pid() AND relation = 'parted.messages'::regclass"
            ).fetchone()
            conn.rollback()
            found.append((what, str(modes[0]) if modes else "?"))
    return found


# -- the reads ------------------------------------------------------------------------------------

READS = [
    ("GET by msg_id", "SELECT * FROM messages WHERE msg_id = %s ORDER BY id"),
    (
        "one by (topic, queue, offset)",
        "SELECT * FROM messages WHERE topic = %s AND queue_id = %s AND queue_offset = %s",
    ),
    (
        "consumer read: 32 from an offset",
        "SELECT * FROM messages WHERE topic = %s AND queue_id = %s AND queue_offset >= %s"
        " ORDER BY queue_offset LIMIT 32",
    ),
]


def read_params(conn: Conn, count: int, rng: random.Random) -> list[list[tuple[Any, ...]]]:
    # A row in 200, anywhere in the table (BERNOULLI samples rows, not pages), shuffled.
    sample = conn.execute("SELECT msg_id FROM messages TABLESAMPLE BERNOULLI (0.5) REPEATABLE (7)")
    ids = [(r[0],) for r in sample]
    rng.shuffle(ids)
    ids = ids[:count]
    ranges = conn.execute("SELECT topic, queue_id, min_offset, next_offset FROM queues").fetchall()
    offsets = []
    for _ in range(count):
        topic, queue_id, low, high = rng.choice(ranges)
        offsets.append((topic, queue_id, rng.randrange(low, high - 32)))
    return [ids, offsets, offsets]


def time_reads(
    dsn: str, schema: str, params: list[list[tuple[Any, ...]]]
) -> list[tuple[float, float, float, int, float, float]]:
    """Per read: mean, p50, p99 us over the parameter list (after a warm-up pass), index scans in
    the plan, and EXPLAIN ANALYZE's planning and execution ms for the first parameters."""
    found = []
    with connect(dsn, schema, autocommit=True) as conn:
        for (_, sql), plist in zip(READS, params, strict=True):
            for p in plist[:50]:
                conn.execute(sql, p).fetchall()
            times = []
            for p in plist:
                t = time.perf_counter()
                conn.execute(sql, p).fetchall()
                times.append((time.perf_counter() - t) * 1e6)
            row = conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, plist[0], prepare=False
            ).fetchone()
            assert row is not None
            plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
            scans = _count_index_scans(plan[0]["Plan"])
            found.append(
                (
                    statistics.fmean(times),
                    pct(times, 0.5),
                    pct(times, 0.99),
                    scans,
                    float(plan[0]["Planning Time"]),
                    float(plan[0]["Execution Time"]),
                )
            )
    return found


def _count_index_scans(node: dict[str, Any]) -> int:
    own = 1 if "Index Name" in node else 0
    return own + sum(_count_index_scans(child) for child in node.get("Plans", []))


# -- the run --------------------------------------------------------------------------------------


DUPLICATES: list[tuple[str, list[tuple[str | None, int]]]] = [
    ("one dedup_key at two offsets", [("DUP", 999_999_998), ("DUP", 999_999_999)]),
    ("one (topic, queue_id, queue_offset) twice", [(None, 999_999_999), (None, 999_999_999)]),
]


def constraint_demo(dsn: str, hour: int) -> list[tuple[str, str, str]]:
    """Two rows an hour apart that the schema's uniqueness forbids: what each table answers (rolled
    back)."""
    found = []
    for what, pair in DUPLICATES:
        answers = []
        for schema in ("plain", "parted"):
            with connect(dsn, schema) as conn:
                try:
                    for (dedup, offset), at in zip(pair, (hour - 1, hour), strict=True):
                        stored_at = at * HOUR + 5
                        conn.execute(
                            "INSERT INTO messages (topic, queue_id, queue_offset, msg_id,"
                            " dedup_key, body, encoding, born_at, stored_at)"
                            " VALUES ('bench-0', 0, %s, 'DUP', %s, 'x', 'utf-8', %s, %s)",
                            (offset, dedup, stored_at, stored_at),
                        )
                    answers.append("both rows stored")
                except psycopg.errors.UniqueViolation as exc:
                    answers.append("refused: " + str(exc).splitlines()[0])
                finally:
                    conn.rollback()
        found.append((what, answers[0], answers[1]))
    return found


def plain_run(dsn: str, args: argparse.Namespace, body: bytes, monitor: Conn) -> Run:
    create_tables(dsn, "plain", messages, queues)
    t0 = (now_ms() // HOUR - args.hours) * HOUR
    filled = fill(dsn, "plain", args.rows, t0, now_ms() - t0, body)
    print(
        f"\n== plain.messages (the schema's table and indexes): {args.rows:,} rows over"
        f" {args.hours} h, filled in {filled:.0f} s; {args.hours - args.retain} h purged in 4 shares"
    )
    table = Run("plain", dsn, args, body, monitor)
    table.measure_sizes("after the fill")
    table.phase("insert alone")
    table.measure_sizes("before the purge")
    purge_hours = args.hours - args.retain
    cutoffs = [t0 + (purge_hours * k // 4) * HOUR for k in range(1, 5)]
    pause = args.pause_ms / 1000
    plans: list[tuple[str, Callable[..., Purge], int]] = [
        ("DELETE offset prefix", purge_by_offset, args.batch_small),
        ("DELETE offset prefix", purge_by_offset, args.batch_mid),
        ("DELETE by stored_at", purge_by_stored_at, args.batch_mid),
        ("DELETE by stored_at", purge_by_stored_at, args.batch_large),
    ]
    for (label, purger, size), cutoff in zip(plans, cutoffs, strict=True):

        def action(
            deadline: float,
            halt: threading.Event,
            purger: Callable[..., Purge] = purger,
            size: int = size,
            cutoff: int = cutoff,
        ) -> Purge:
            return purger(dsn, size, cutoff, pause, deadline, halt)

        table.phase(f"{label}, {size:,}", action)
    _, dead = table.measure_sizes("after the purge")
    # The probe first: the check's reads walk the dead index entries too, and mark them dead.
    notes = ["reads over the dead entries: " + probe(monitor, "plain")]
    notes.append(check(monitor, "plain", cutoffs[-1]))
    half = args.seconds / 2
    table.phase("insert alone, not vacuumed", seconds=half)
    table.measure_sizes("after inserting, not vacuumed")

    def vacuum(deadline: float, halt: threading.Event) -> Purge:
        with connect(dsn, "plain", autocommit=True) as conn:
            t = time.perf_counter()
            conn.execute("VACUUM messages")
            took = time.perf_counter() - t
        return Purge(rows=0, txns=[took], seconds=took, done=True)

    took = table.phase("VACUUM beside the writer", vacuum).seconds
    table.measure_sizes(f"after VACUUM ({took:.1f} s, {dead:,} dead rows)")
    notes.append("reads after VACUUM: " + probe(monitor, "plain"))
    table.phase("insert alone, vacuumed", seconds=half)
    table.measure_sizes("after inserting into the vacuumed table")
    table.print_phases()
    print("  (* = the share was not all purged in --seconds; the next phase goes on with it)")
    table.print_sizes()
    for note in notes:
        print("  " + note)
    return table


def parted_run(dsn: str, args: argparse.Namespace, body: bytes, monitor: Conn) -> Run:
    first = now_ms() // HOUR - args.hours
    current = now_ms() // HOUR
    refused = create_parted(dsn, first, current + args.ahead)
    print("\n== partitioned: the schema's global uniqueness, asked of PostgreSQL")
    for what, answer in refused:
        print(f"  UNIQUE {what:<34} {answer}")
    filled = fill(dsn, "parted", args.rows, first * HOUR, now_ms() - first * HOUR, body)
    print("  kept instead: PRIMARY KEY (id, stored_at); the others as non-unique indexes")
    print("  two rows an hour apart:")
    for what, plain_answer, parted_answer in constraint_demo(dsn, current):
        print(f"    {what}: plain {plain_answer}; partitioned {parted_answer}")
    spare = current + args.ahead + 1000
    locks = parent_locks(
        dsn,
        [
            ("CREATE TABLE ... PARTITION OF", [partition_ddl(spare)]),
            ("CREATE TABLE, then ATTACH PARTITION", attach_ddl(spare)),
            ("DROP TABLE <partition>", [f"DROP TABLE {partition_name(first)}"]),
            (
                "DETACH PARTITION (not concurrently)",
                [f"ALTER TABLE messages DETACH PARTITION {partition_name(first)}"],
            ),
        ],
    )
    print("  locks taken on the parent (DETACH ... CONCURRENTLY: ShareUpdateExclusiveLock):")
    for what, mode in locks:
        print(f"    {what:<38}{mode}")

    counts = {
        int(name.rsplit("_h", 1)[1]): int(n)
        for name, n in monitor.execute(
            "SELECT tableoid::regclass::text, count(*) FROM parted.messages GROUP BY 1"
        )
    }
    print(
        f"\n== parted.messages, PARTITION BY RANGE (stored_at), {current + args.ahead - first + 1}"
        f" hourly partitions: {args.rows:,} rows over {args.hours} h, filled in {filled:.0f} s"
    )
    table = Run("parted", dsn, args, body, monitor)
    table.measure_sizes("after the fill")
    table.phase("insert alone")
    table.measure_sizes("before the purge")
    pool = list(range(first, first + args.hours - args.retain))
    ahead = iter(range(current + args.ahead + 1, current + args.ahead + 1 + len(pool)))
    behind, pool = pool[:1], pool[1:]
    drops, detaches = pool[: len(pool) // 2], pool[len(pool) // 2 :]
    pause = args.drop_pause
    for label, hours, concurrently in (
        ("DROP + CREATE", drops, False),
        ("DETACH CONC.+DROP, CREATE+ATTACH", detaches, True),
    ):

        def action(
            deadline: float,
            halt: threading.Event,
            hours: list[int] = hours,
            concurrently: bool = concurrently,
        ) -> Purge:
            return purge_partitions(dsn, hours, ahead, counts, concurrently, pause, deadline, halt)

        table.phase(f"{label} x{len(hours)}", action)

    def blocked(deadline: float, halt: threading.Event) -> Purge:
        holding = threading.Event()

        def reader() -> None:
            with connect(dsn, "parted") as conn:
                conn.execute("SELECT count(*) FROM messages WHERE msg_id = 'none'").fetchall()
                holding.set()
                time.sleep(args.reader_hold)
                conn.rollback()

        thread = threading.Thread(target=reader, daemon=True)
        time.sleep(0.5)
        thread.start()
        holding.wait()
        purge = purge_partitions(dsn, behind, ahead, counts, False, 0.5, deadline, halt)
        thread.join()
        return purge

    table.phase(f"DROP + CREATE x1 behind a {args.reader_hold:g} s read", blocked)
    table.measure_sizes("after the purge")
    notes = ["reads: " + probe(monitor, "parted")]
    notes.append(check(monitor, "parted", (first + args.hours - args.retain) * HOUR))
    table.phase("insert alone, after the purge", seconds=args.seconds / 2)
    table.print_phases()
    print("  (* = not all partitions of the share dropped in --seconds)")
    table.print_sizes()
    for note in notes:
        print("  " + note)
    # Back to the steady-state partition count (retained hours, the current one, --ahead more):
    # the purge above made a partition ahead per hour it dropped, in seconds.
    with connect(dsn, "parted", autocommit=True) as conn:
        for hour in range(current + args.ahead + 1, current + args.ahead + 1 + len(counts)):
            conn.execute(f"DROP TABLE IF EXISTS {partition_name(hour)}")
    return table


def reads(dsn: str, args: argparse.Namespace) -> None:
    rng = random.Random(11)
    with connect(dsn, "plain", autocommit=True) as conn:
        conn.execute("ANALYZE messages")
        plain_params = read_params(conn, args.lookups, rng)
    with connect(dsn, "parted", autocommit=True) as conn:
        conn.execute("ANALYZE messages")
        parted_params = read_params(conn, args.lookups, rng)
        row = conn.execute(
            "SELECT count(*) FROM pg_partition_tree('messages'::regclass) WHERE isleaf"
        ).fetchone()
        partitions = int(row[0]) if row else 0
    plain = time_reads(dsn, "plain", plain_params)
    parted = time_reads(dsn, "parted", parted_params)
    print(
        f"\n== the broker's reads after the purge, {args.lookups:,} each (plain vs {partitions}"
        " partitions; us per read, from Python, prepared after 5)"
    )
    print(
        f"{'read':<34}{'table':<8}{'mean us':>9}{'p50':>7}{'p99':>7}{'x plain':>9}"
        f"{'index scans':>13}{'plan ms':>9}{'exec ms':>9}"
    )
    for (name, _), a, b in zip(READS, plain, parted, strict=True):
        for table, r in (("plain", a), ("parted", b)):
            print(
                f"{name:<34}{table:<8}{r[0]:>9,.0f}{r[1]:>7,.0f}{r[2]:>7,.0f}{r[0] / a[0]:>9.2f}"
                f"{r[3]:>13}{r[4]:>9.2f}{r[5]:>9.2f}"
            )


def summary(plain: Run, parted: Run) -> None:
    """Per purge: the insert rate as a share of the table's alone, the purge rate (over the
    phase, and over the time in purge statements), and what the purge cost per row it removed:
    the inserts the writer did not make against its alone rate (negative: it made more, the
    machine's drift), and the WAL beyond the writer's (its alone phases' WAL per row).  VACUUM's
    costs are per dead row it cleaned."""
    print("\n== summary")
    print(
        f"  insert alone: plain {plain.alone:,.0f} rows/s, partitioned {parted.alone:,.0f} rows/s"
        f" (partitioned / plain {parted.alone / plain.alone:.2f})"
    )
    print(
        f"  {'purge':<44}{'inserts x alone':>16}{'purged/s':>10}{'per s of statements':>21}"
        f"{'inserts lost per row':>22}{'WAL B per row':>15}{'insert max ms':>15}"
    )
    dead = sum(p.purge.rows for p in plain.phases if p.purge is not None)
    for table in (plain, parted):
        alone = [p for p in table.phases if p.purge is None]
        wal_per_insert = sum(p.wal_bytes for p in alone) / sum(p.inserted for p in alone)
        for p in table.phases:
            if p.purge is None:
                continue
            removed = p.purge.rows or dead  # VACUUM: the dead rows of every DELETE
            lost = (table.alone * p.seconds - p.inserted) / removed
            wal = (p.wal_bytes - p.inserted * wal_per_insert) / removed
            busy = sum(p.purge.txns)
            rates = (
                f"{p.purge.rows / p.purge.seconds:>10,.0f}{p.purge.rows / busy:>21,.0f}"
                if p.purge.rows
                else f"{'-':>10}{'-':>21}"
            )
            print(
                f"  {table.schema + ': ' + p.label:<44}{p.rate / table.alone:>16.2f}{rates}"
                f"{lost:>22.2f}{wal:>15,.0f}{max(p.latencies) * 1000:>15,.0f}"
            )


def settings(conn: Conn) -> str:
    names = ("server_version", "shared_buffers", "autovacuum", "synchronous_commit", "max_wal_size")
    shown = [
        f"{n}={conn.execute('SELECT current_setting(%s)', (n,)).fetchall()[0][0]}" for n in names
    ]
    return "PostgreSQL " + ", ".join(shown)


def loads(when: str) -> str:
    """Other work on the machine moves every figure: the load averages, to read them by."""
    one, five, fifteen = os.getloadavg()
    return f"load average {when}: {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="pre-filled per table")
    parser.add_argument("--hours", type=int, default=48, help="simulated hours the fill spans")
    parser.add_argument("--retain", type=int, default=24, help="hours kept (the rest is purged)")
    parser.add_argument("--seconds", type=float, default=30, help="a phase at most")
    parser.add_argument("--batch", type=int, default=100, help="rows per insert transaction")
    parser.add_argument("--batch-small", type=int, default=500)
    parser.add_argument("--batch-mid", type=int, default=2_000)
    parser.add_argument("--batch-large", type=int, default=10_000)
    parser.add_argument("--pause-ms", type=float, default=10, help="between DELETE batches")
    parser.add_argument("--drop-pause", type=float, default=0.5, help="s between partition drops")
    parser.add_argument("--reader-hold", type=float, default=2.0)
    parser.add_argument("--ahead", type=int, default=2, help="partitions made ahead of now")
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument("--lookups", type=int, default=2_000)
    parser.add_argument("--keep", action="store_true", help="leave the scratch database")
    args = parser.parse_args()
    # A kill runs the cleanup below too (SIGINT does already, as KeyboardInterrupt).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not 0 < args.retain < args.hours:
        parser.error("--retain must be between 0 and --hours")
    body = bytes(random.Random(5).randrange(32, 127) for _ in range(args.body_bytes))
    dsn = make_conninfo(ADMIN, dbname=DB)
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")  # our own, from a killed run
        admin.execute(f"CREATE DATABASE {DB}")
        try:
            with psycopg.connect(dsn, autocommit=True) as monitor:
                print(settings(monitor))
                print(loads("at the start"))
                monitor.execute("CREATE SCHEMA plain")
                monitor.execute("CREATE SCHEMA parted")
                with contextlib.suppress(psycopg.Error):
                    monitor.execute("CREATE EXTENSION pgstattuple")
                plain = plain_run(dsn, args, body, monitor)
                parted = parted_run(dsn, args, body, monitor)
                reads(dsn, args)
                summary(plain, parted)
                print(loads("at the end"))
        finally:
            if not args.keep:
                admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


if __name__ == "__main__":
    main()
