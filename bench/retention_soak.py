"""Retention soak: a short retention under steady send + consume load; the store's size and the
broker's RSS over time, and sends while a purge round runs against sends while none does.

    python bench/retention_soak.py [--minutes 10] [--retention-seconds 60] [--store sqlite]
        [--rate 1500] [--batch 50] [--closed-minutes 2] [--closed-connections 16]
        [--purge-interval 60] [--purge-batch 1000] [--purge-share 0.05] [--purge-pause 0.002]
        [--sample-seconds 10] [--acl] [--acl-window-seconds 60]

It starts one broker process on 127.0.0.1 (``--store sqlite``: a fresh file; ``postgresql``: a
scratch schema of its own in the ``test`` database, dropped at the end) with
``HALFMQ_RETENTION_HOURS`` = ``--retention-seconds`` and ``HALFMQ_RETENTION_WAIT_FOR_EXPORT=false``,
creates a topic (4 queues) and one consumer group subscribed to it, and a second topic nobody
subscribes to, then runs two phases:

* fixed rate   ``--minutes``: batches of ``--batch`` messages of ``--body-bytes`` sent on a fixed
               schedule (``--rate`` messages a second, over ``--connections`` keep-alive
               connections); a batch's latency runs from the time it was *due*, so a stall that
               delays the batches behind it counts in theirs (no coordinated omission).
               ``--consumers`` clients receive (32, long poll) and ack everything.
* closed loop  ``--closed-minutes`` more: the same fixed-rate sends and consumers go on (so do the
               purge rounds over them), and ``--closed-connections`` senders send messages
               (``--closed-batch`` a request; 1: ``POST .../messages``) to the unsubscribed topic
               as fast as the broker answers.  No group reads that topic, so retention purges it
               past ``--retention-seconds`` without anyone acking: its rate is the broker's spare
               send capacity on top of the steady load, and nothing gates it.

``--acl``: the broker runs with an ACL (one admin account) and every request is signed, so each
one's nonce is stored and expired ``--acl-window-seconds`` later (default 60; the broker's own
default, 300, outlasts a short run) -- ``acl_nonces`` churns as the other tables do.

Every ``--sample-seconds`` it reads the SQLite file and its -wal (PostgreSQL: the tables' size),
``GET /v1/store/stats`` (size, free pages, rows per table: counted, a read of its own), the
broker's VmRSS and CPU from /proc, and the retention counters of ``GET /metrics``.  Purge rounds
are timed from the broker's log: each round logs ``purged ... in X.XXs`` at its end.

PostgreSQL: also the schema's size on disk (every table, index and TOAST table, from
``pg_total_relation_size``) and each purged table's live and dead rows (``pg_stat_user_tables``)
and VACUUMs (manual and auto), read over a connection of its own; printed as a second curve, with
the schema's size in the flatness check.

It prints the purge rounds, a curve (one row each ``--table-seconds``: sizes and rows as the most
seen in the window), whether size, rows and RSS are flat (the most of the fixed phase's second half
against the most of minute ``--ref-minute`` to ``--ref-minute`` + 1; flat: at most 1.10; "level":
higher, but the second half's least-squares slope moves it less than 10 % over the half, i.e. it
settled after the reference; else GROWS), and the throughput comparison, per phase, over the
seconds after the first purge round: seconds a round overlapped by at least half against seconds
no round touched (the ones in between are left out), as messages sent (and acked) a second and
their ratio, target >= 0.90; and the latency of batches whose request overlapped a round against
those that did not.

What is honest: at a fixed offered rate the broker keeps up either way, so sends/s during and
without purges are equal by construction (printed only to show the schedule held); a purge round
shows there as latency.  The closed-loop senders' ratio is the one that can fall below 0.90: a
purge unit and the sends share the store's writer and the broker's one core.  (A first version
gated closed-loop sends on the consumers' backlog; that measured two consumers' serial
receive + ack round trips, which a purge unit in their group commit stretches, not send capacity.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import orjson
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_bench import PG_BASE, free_port
from loadgen import Connection

from broker_service.store.sql_store import RECLAIMED
from framework.signing import Credentials, HalfmqAuth, sign_headers

TOPIC, GROUP, QUEUES = "soak", "soak-group", 4
UNREAD = "soak-unread"  # the closed-loop senders' topic: no group subscribes
RECEIVE_MAX = 32
FLAT = 1.10  # the most of the last half over the reference at most this: flat
TARGET = 0.90  # sends during purge rounds over sends without
ROWS = ("messages", "deliveries", "purged_ids")
# PostgreSQL: the tables the purge and the nonces' expiry delete from (the store's own list,
# which its vacuum reads), sampled for dead rows.
PURGED = RECLAIMED
ADMIN = Credentials("soak-admin-key", "soak-admin-secret-0123456789")
ACL_FILE = f"""\
globalWhiteRemoteAddresses:
  - 127.0.0.1
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
"""
Signer = Callable[[str, str, bytes], dict[str, str]] | None
_PURGE_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO halfmq\.retention: purged (.+?) in ([\d.]+)s(.*)$"
)
_METRIC = re.compile(r'^(\w+)(?:\{(\w+)="([^"]*)"[^}]*\})? (\S+)$')
_TICK = os.sysconf("SC_CLK_TCK")


# -- the broker ------------------------------------------------------------------------------------


@dataclass
class Broker:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    db: Path | None  # the SQLite file

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_broker(
    url: str, db: Path | None, log: Path, args: argparse.Namespace, acl: Path | None
) -> Broker:
    subprocess.run(
        [sys.executable, "-m", "halfmq", "db", "upgrade", "--database-url", url],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ)
    env.update(
        HALFMQ_RETENTION_HOURS=repr(args.retention_seconds / 3600),
        HALFMQ_RETENTION_WAIT_FOR_EXPORT="false",
        HALFMQ_PURGE_INTERVAL_SECONDS=repr(args.purge_interval),
        HALFMQ_PURGE_BATCH=str(args.purge_batch),
        HALFMQ_PURGE_PAUSE_SECONDS=repr(args.purge_pause),
        HALFMQ_PURGE_SHARE=repr(args.purge_share),
    )
    port = free_port()
    command = [sys.executable, "-m", "halfmq", "broker", "serve", "--database-url", url]
    command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "info"]
    if acl is not None:
        command += ["--acl", str(acl), "--acl-window-seconds", repr(args.acl_window_seconds)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    broker = Broker(process, port, log, db)
    for _ in range(300):
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return broker
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    broker.stop()
    raise RuntimeError(f"broker not ready: {log.read_text()}")


def file_sizes(db: Path) -> tuple[int, int]:
    """The SQLite file's size and its -wal's."""
    sizes = []
    for path in (db, Path(f"{db}-wal")):
        try:
            sizes.append(path.stat().st_size)
        except OSError:
            sizes.append(0)
    return sizes[0], sizes[1]


def proc_status(pid: int) -> tuple[int, float]:
    """The process's VmRSS (kB) and CPU seconds (user + system, all threads)."""
    rss = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    cpu = 0.0
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
    return rss, cpu


# -- what the run records --------------------------------------------------------------------------


@dataclass
class Sample:
    at: float  # wall clock
    phase: str
    db: int  # bytes: the SQLite file, or PostgreSQL's tables and indexes
    wal: int
    free: int
    rows: dict[str, int]
    rss_kb: int
    cpu: float
    sent: int
    acked: int
    rounds: int  # purge rounds that purged something (metrics)
    purged: dict[str, int]  # rows purged per table (metrics)


@dataclass
class PgSample:
    at: float  # wall clock
    size: int  # bytes: the schema's tables, indexes and TOAST
    tables: dict[str, tuple[int, int, int]]  # table -> (live rows, dead rows, vacuums)


@dataclass
class Round:
    start: float  # wall clock
    end: float
    counts: dict[str, int]
    cut_short: bool = False  # the round stopped at its most rows; the next goes on

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class Load:
    wall_offset: float  # time.time() - time.perf_counter()
    sent: int = 0
    acked: int = 0
    send_errors: int = 0
    ack_errors: int = 0
    sends: list[tuple[float, float, int]] = field(default_factory=list)  # end (wall), latency, n
    closed: list[tuple[float, float, int]] = field(default_factory=list)  # closed-loop sends
    closed_sent: int = 0
    cpu: list[tuple[float, float]] = field(default_factory=list)  # wall, broker CPU seconds
    acks: list[tuple[float, int]] = field(default_factory=list)  # wall, n
    samples: list[Sample] = field(default_factory=list)
    pg: list[PgSample] = field(default_factory=list)
    sign: Signer = None  # --acl: the headers that sign a request
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> wall span

    def wall(self, perf: float) -> float:
        return perf + self.wall_offset


def parse_metrics(body: str) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for line in body.splitlines():
        match = _METRIC.match(line)
        if match and not line.startswith("#"):
            name, _, label, value = match.groups()
            with contextlib.suppress(ValueError):
                found[name, label or ""] = float(value)
    return found


def purge_rounds(log: Path) -> tuple[list[Round], list[str]]:
    """Rounds from the broker's log lines, and its warnings and errors."""
    rounds: list[Round] = []
    problems: list[str] = []
    for line in log.read_text(errors="replace").splitlines():
        match = _PURGE_LINE.match(line)
        if match:
            stamp, what, seconds, note = match.groups()
            end = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            counts = {}
            for part in what.split(", "):
                n, _, table = part.partition(" ")
                counts[table] = int(n)
            rounds.append(Round(end - float(seconds), end, counts, "cut short" in note))
        elif " WARNING " in line or " ERROR " in line or "Traceback" in line:
            problems.append(line)
    return rounds, problems


# -- load ------------------------------------------------------------------------------------------


def batch_payload(batch: int, body_bytes: int) -> dict[str, object]:
    return {"messages": [{"body": "x" * body_bytes} for _ in range(batch)]}


def signer(acl: bool) -> Signer:
    """--acl: every request signed by the admin account (a fresh nonce each)."""
    if not acl:
        return None

    def sign(method: str, target: str, payload: bytes) -> dict[str, str]:
        path, _, query = target.partition("?")
        return sign_headers(ADMIN, method, path, query, payload)

    return sign


def client(port: int, acl: bool, timeout: float) -> httpx.AsyncClient:
    auth = HalfmqAuth(ADMIN) if acl else None
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout, auth=auth)


async def setup(port: int, acl: bool) -> None:
    async with client(port, acl, 30) as client_:
        for path, body in (
            ("/v1/topics", {"name": TOPIC, "queues": QUEUES}),
            ("/v1/topics", {"name": UNREAD, "queues": QUEUES}),
            ("/v1/consumer-groups", {"name": GROUP, "consume_from": "FIRST_OFFSET"}),
            (f"/v1/consumer-groups/{GROUP}/subscriptions", {"topic": TOPIC}),
        ):
            answer = await client_.post(path, json=body)
            if answer.status_code >= 300:
                raise RuntimeError(f"{path}: HTTP {answer.status_code} {answer.text[:200]}")


async def send(conn: Connection, payload: dict[str, object], load: Load, due: float) -> None:
    status, _ = await conn.request("POST", f"/v1/topics/{TOPIC}/messages:batch", payload, load.sign)
    ended = time.perf_counter()
    if status != 201:
        load.send_errors += 1
        return
    n = len(payload["messages"])  # type: ignore[arg-type]
    load.sent += n
    load.sends.append((load.wall(ended), ended - due, n))


async def send_unread(conn: Connection, path: str, payload: object, n: int, load: Load) -> None:
    began = time.perf_counter()
    status, _ = await conn.request("POST", path, payload, load.sign)
    ended = time.perf_counter()
    if status != 201:
        load.send_errors += 1
        await asyncio.sleep(0.01)
        return
    load.closed_sent += n
    load.closed.append((load.wall(ended), ended - began, n))


async def fixed_rate(port: int, args: argparse.Namespace, load: Load, until: float) -> None:
    """Batches due every batch/rate seconds; each takes the next free connection."""
    payload = batch_payload(args.batch, args.body_bytes)
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    conns = [await Connection.open("127.0.0.1", port) for _ in range(args.connections)]
    for conn in conns:
        pool.put_nowait(conn)
    interval = args.batch / args.rate
    inflight: set[asyncio.Task[None]] = set()

    async def one(conn: Connection, due: float) -> None:
        try:
            await send(conn, payload, load, due)
        finally:
            pool.put_nowait(conn)

    start = time.perf_counter()
    k = 0
    while (due := start + k * interval) < until:
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        conn = await pool.get()
        task = asyncio.create_task(one(conn, due))
        inflight.add(task)
        task.add_done_callback(inflight.discard)
        k += 1
    await asyncio.gather(*inflight)
    for conn in conns:
        conn.close()


async def closed_loop(port: int, args: argparse.Namespace, load: Load, until: float) -> None:
    """As fast as the broker answers, to the topic nobody reads."""
    n = args.closed_batch
    if n == 1:
        path, payload = f"/v1/topics/{UNREAD}/messages", {"body": "y" * args.body_bytes}
    else:
        path, payload = f"/v1/topics/{UNREAD}/messages:batch", batch_payload(n, args.body_bytes)

    async def sender() -> None:
        conn = await Connection.open("127.0.0.1", port)
        try:
            while time.perf_counter() < until:
                await send_unread(conn, path, payload, n, load)
        finally:
            conn.close()

    await asyncio.gather(*(sender() for _ in range(args.closed_connections)))


async def consumer(port: int, name: str, load: Load, stop: asyncio.Event) -> None:
    conn = await Connection.open("127.0.0.1", port)
    receive = {"client_id": name, "max_messages": RECEIVE_MAX, "wait_seconds": 1}
    try:
        while not stop.is_set():
            status, data = await conn.request(
                "POST", f"/v1/consumer-groups/{GROUP}/receive", receive, load.sign
            )
            if status != 200:
                load.ack_errors += 1
                await asyncio.sleep(0.1)
                continue
            handles = [m["receipt_handle"] for m in orjson.loads(data)["messages"]]
            if not handles:
                continue
            status, _ = await conn.request(
                "POST", f"/v1/consumer-groups/{GROUP}/ack", {"receipt_handles": handles}, load.sign
            )
            if status != 200:
                load.ack_errors += 1
                continue
            load.acked += len(handles)
            load.acks.append((time.time(), len(handles)))
    finally:
        conn.close()


async def sampler(broker: Broker, load: Load, every: float, phase: list[str]) -> None:
    async with client(broker.port, load.sign is not None, 60) as http:
        while True:
            began = time.perf_counter()
            stats = await http.get("/v1/store/stats")
            found = stats.json() if stats.status_code == 200 else {}
            metrics = parse_metrics((await http.get("/metrics")).text)
            if broker.db is not None:
                db, wal = file_sizes(broker.db)
            else:
                wal = 0
                db = int(found.get("size_bytes", metrics.get(("halfmq_store_size_bytes", ""), 0)))
            rss, cpu = proc_status(broker.pid)
            purged = {
                label: int(value)
                for (name, label), value in metrics.items()
                if name == "halfmq_retention_purged_rows_total"
            }
            rounds = int(metrics.get(("halfmq_retention_rounds_total", "purged"), 0))
            load.samples.append(
                Sample(
                    time.time(),
                    phase[0],
                    db,
                    wal,
                    int(found.get("free_bytes", 0)),
                    dict(found.get("rows", {})),
                    rss,
                    cpu,
                    load.sent,
                    load.acked,
                    rounds,
                    purged,
                )
            )
            await asyncio.sleep(max(0.0, every - (time.perf_counter() - began)))


_PG_SIZE = text(
    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
    "WHERE c.relnamespace = CAST(:schema AS regnamespace) AND c.relkind = 'r'"
)
_PG_ROWS = text(
    "SELECT relname, n_live_tup, n_dead_tup, vacuum_count + autovacuum_count "
    "FROM pg_stat_user_tables WHERE schemaname = :schema AND relname = ANY(:tables)"
)


def pg_sample(url: str, schema: str) -> PgSample:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            size = int(conn.execute(_PG_SIZE, {"schema": schema}).scalar_one())
            found = conn.execute(_PG_ROWS, {"schema": schema, "tables": list(PURGED)}).all()
    finally:
        engine.dispose()
    tables = {str(t): (int(live), int(dead), int(vacuums)) for t, live, dead, vacuums in found}
    return PgSample(time.time(), size, tables)


async def pg_sampler(url: str, schema: str, load: Load, every: float) -> None:
    """PostgreSQL: the schema's size on disk and the purged tables' live and dead rows."""
    while True:
        began = time.perf_counter()
        load.pg.append(await asyncio.to_thread(pg_sample, url, schema))
        await asyncio.sleep(max(0.0, every - (time.perf_counter() - began)))


async def cpu_sampler(pid: int, load: Load) -> None:
    """The broker's CPU seconds each second (a /proc read), to split CPU by purge rounds."""
    while True:
        load.cpu.append((time.time(), proc_status(pid)[1]))
        await asyncio.sleep(1.0 - time.time() % 1.0)


async def soak(broker: Broker, args: argparse.Namespace, pg: tuple[str, str] | None) -> Load:
    await setup(broker.port, args.acl)
    load = Load(time.time() - time.perf_counter(), sign=signer(args.acl))
    stop = asyncio.Event()
    phase = ["fixed"]
    consumers = [
        asyncio.create_task(consumer(broker.port, f"c{n}", load, stop))
        for n in range(args.consumers)
    ]
    sampling = asyncio.create_task(sampler(broker, load, args.sample_seconds, phase))
    cpu = asyncio.create_task(cpu_sampler(broker.pid, load))
    tasks = [sampling, cpu]
    if pg is not None:
        tasks.append(asyncio.create_task(pg_sampler(*pg, load, args.sample_seconds)))
    try:
        began = time.perf_counter()
        switch = began + args.minutes * 60
        steady = asyncio.create_task(
            fixed_rate(broker.port, args, load, switch + args.closed_minutes * 60)
        )
        await asyncio.sleep(switch - time.perf_counter())
        load.phases["fixed"] = (load.wall(began), load.wall(switch))
        if args.closed_minutes > 0:
            phase[0] = "closed"
            await closed_loop(broker.port, args, load, switch + args.closed_minutes * 60)
        await steady
        if args.closed_minutes > 0:
            load.phases["closed"] = (load.wall(switch), time.time())
    finally:
        stop.set()
        await asyncio.gather(*consumers, return_exceptions=True)
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return load


# -- figures ---------------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def overlap(start: float, end: float, rounds: Sequence[Round]) -> float:
    return sum(max(0.0, min(end, r.end) - max(start, r.start)) for r in rounds)


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float:
    """Least squares: how much the value moves a minute."""
    if len(points) < 2:
        return float("nan")
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def print_rounds(rounds: Sequence[Round], t0: float) -> None:
    print(f"\n== purge rounds that purged something: {len(rounds)} (from the broker's log)")
    if not rounds:
        return
    tables = sorted({t for r in rounds for t in r.counts})
    print(
        f"{'start':>7}{'after':>7}{'seconds':>9}{'rows/s':>9}"
        + "".join(f"{t:>14}" for t in tables)
        + "  cut short (its most rows reached)"
    )
    previous = None
    for r in rounds:
        cells = "".join(f"{r.counts.get(t, 0):>14,}" for t in tables)
        after = "" if previous is None else f"{r.start - previous:.0f}"
        print(
            f"{clock(r.start - t0):>7}{after:>7}{r.seconds:>9.2f}"
            f"{sum(r.counts.values()) / max(r.seconds, 0.01):>9,.0f}{cells}  "
            f"{'yes' if r.cut_short else ''}"
        )
        previous = r.start
    durations = [r.seconds for r in rounds]
    print(
        f"round seconds p50 {percentile(durations, 0.5):.2f}, max {max(durations):.2f}; "
        f"rows a round p50 {percentile([sum(r.counts.values()) for r in rounds], 0.5):,.0f}"
    )


def clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def print_curve(load: Load, t0: float, every: float, sqlite: bool) -> None:
    print(
        f"\n== curve (a row each {every:.0f} s; sizes and rows: the most sampled in the row's "
        "window; sends, p99 and acks over the window)"
    )
    head = f"{'time':>6} {'phase':<7}{'db MB':>8}{'wal MB':>8}{'free MB':>8}" if sqlite else ""
    if not sqlite:
        head = f"{'time':>6} {'phase':<7}{'store MB':>9}"
    head += "".join(f"{name:>11}" for name in ROWS)
    head += f"{'RSS MB':>8}{'CPU %':>7}{'sent/s':>8}{'p99 ms':>8}{'acked/s':>8}{'backlog':>8}"
    head += f"{'closed/s':>9}"
    head += f"{'purged':>10}{'rounds':>7}"
    print(head)
    window: list[Sample] = []
    last_at, last_cpu = t0, load.samples[0].cpu if load.samples else 0.0
    next_row = t0 + every
    for i, s in enumerate(load.samples):
        window.append(s)
        final = i == len(load.samples) - 1
        if s.at < next_row - 0.5 and not final:
            continue
        span = max(1e-9, s.at - last_at)
        sends = [(lat, n) for end, lat, n in load.sends if last_at <= end < s.at]
        acked = sum(n for at, n in load.acks if last_at <= at < s.at)
        p99 = percentile([lat for lat, _ in sends], 0.99) * 1000
        row = f"{clock(s.at - t0):>6} {s.phase:<7}"
        if sqlite:
            row += f"{mb(max(w.db for w in window)):>8}{mb(max(w.wal for w in window)):>8}"
            row += f"{mb(max(w.free for w in window)):>8}"
        else:
            row += f"{mb(max(w.db for w in window)):>9}"
        row += "".join(f"{max(w.rows.get(name, 0) for w in window):>11,}" for name in ROWS)
        row += f"{max(w.rss_kb for w in window) / 1024:>8.0f}"
        row += f"{100 * (s.cpu - last_cpu) / span:>7.0f}"
        row += f"{sum(n for _, n in sends) / span:>8,.0f}{p99:>8.1f}{acked / span:>8,.0f}"
        closed = sum(n for end, _, n in load.closed if last_at <= end < s.at)
        row += f"{s.sent - s.acked:>8,}{closed / span:>9,.0f}"
        row += f"{s.purged.get('messages', 0):>10,}{s.rounds:>7}"
        print(row)
        window, last_at, last_cpu = [], s.at, s.cpu
        while next_row <= s.at + 0.5:
            next_row += every


def rows_of(name: str) -> Callable[[Sample], float]:
    return lambda s: float(s.rows.get(name, 0))


def print_flatness(load: Load, t0: float, args: argparse.Namespace, sqlite: bool) -> None:
    fixed = [s for s in load.samples if s.phase == "fixed"]
    ref_from, ref_to = t0 + args.ref_minute * 60, t0 + (args.ref_minute + 1) * 60
    half = t0 + args.minutes * 30
    ref = [s for s in fixed if ref_from <= s.at < ref_to]
    late = [s for s in fixed if s.at >= half]
    print(
        f"\n== flat?  the most of the fixed phase's second half ({clock(half - t0)}-"
        f"{clock(args.minutes * 60)}) / the most of {clock(ref_from - t0)}-{clock(ref_to - t0)}; "
        f"flat: <= {FLAT:.2f}; slope: least squares over the second half; 'level': above the "
        f"reference but the slope moves it less than {FLAT - 1:.0%} over the second half (it "
        "settled later than the reference); GROWS otherwise"
    )
    if not ref or not late or ref_to > half:
        print("(too short a run for this: --minutes must be at least twice --ref-minute + 1)")
        return
    series: list[tuple[str, Callable[[Sample], float], str]] = []
    if sqlite:
        series.append(("db + wal file MB", lambda s: (s.db + s.wal) / 1e6, "MB"))
        series.append(("db + wal - free MB", lambda s: (s.db + s.wal - s.free) / 1e6, "MB"))
    else:
        series.append(("tables + indexes MB", lambda s: s.db / 1e6, "MB"))
    for name in ROWS:
        series.append((f"{name} rows", rows_of(name), "rows"))
    series.append(("broker RSS MB", lambda s: s.rss_kb / 1024, "MB"))
    print(
        f"{'':<22}{'reference':>12}{'2nd half max':>14}{'ratio':>8}{'slope/min':>12}"
        f"{'half x slope':>14}  verdict"
    )
    half_minutes = args.minutes / 2
    for label, value, unit in series:
        before = max(value(s) for s in ref)
        after = max(value(s) for s in late)
        ratio = after / before if before else float("inf") if after else 1.0
        slope = slope_per_minute([(s.at - t0, value(s)) for s in late])
        drift = slope * half_minutes / after if after else 0.0
        verdict = "flat" if ratio <= FLAT else "level" if drift <= FLAT - 1 else "GROWS"
        fmt = ",.1f" if unit == "MB" else ",.0f"
        print(
            f"{label:<22}{before:>12{fmt}}{after:>14{fmt}}{ratio:>8.2f}{slope:>+12{fmt}}"
            f"{drift:>+14.1%}  {verdict}"
        )


def print_pg(load: Load, t0: float, args: argparse.Namespace) -> None:
    """PostgreSQL: the schema's size and each purged table's live / dead rows over time, and
    whether the size is flat (as :func:`print_flatness` judges the others)."""
    if not load.pg:
        return
    every = args.table_seconds
    print(
        f"\n== PostgreSQL: the schema's size on disk (tables, indexes, TOAST) and live / dead rows "
        f"of the tables the purge and the nonces' expiry delete from (a row each {every:.0f} s: "
        "the last sample; vac: VACUUMs so far, manual and auto)"
    )
    print(f"{'time':>6}{'size MB':>9}" + "".join(f"{t:>20}" for t in PURGED) + f"{'vac':>5}")
    next_row = t0
    for i, p in enumerate(load.pg):
        if p.at < next_row - 0.5 and i != len(load.pg) - 1:
            continue
        cells = "".join(
            f"{'{:,}/{:,}'.format(*p.tables.get(t, (0, 0, 0))[:2]):>20}" for t in PURGED
        )
        vacuums = sum(v for _, _, v in p.tables.values())
        print(f"{clock(p.at - t0):>6}{mb(p.size):>9}{cells}{vacuums:>5}")
        while next_row <= p.at + 0.5:
            next_row += every
    ref_from, ref_to = t0 + args.ref_minute * 60, t0 + (args.ref_minute + 1) * 60
    half = t0 + args.minutes * 30
    ref = [p for p in load.pg if ref_from <= p.at < ref_to]
    late = [p for p in load.pg if half <= p.at < t0 + args.minutes * 60]
    if not ref or not late or ref_to > half:
        return
    for label, value in (
        ("schema size MB", lambda p: p.size / 1e6),
        ("dead rows, all", lambda p: float(sum(d for _, d, _ in p.tables.values()))),
    ):
        before, after = max(value(p) for p in ref), max(value(p) for p in late)
        ratio = after / before if before else float("inf") if after else 1.0
        slope = slope_per_minute([(p.at - t0, value(p)) for p in late])
        drift = slope * args.minutes / 2 / after if after else 0.0
        verdict = "flat" if ratio <= FLAT else "level" if drift <= FLAT - 1 else "GROWS"
        print(
            f"{label:<16} reference {before:,.1f}  2nd half max {after:,.1f}  ratio {ratio:.2f}"
            f"  slope/min {slope:+,.1f}  half x slope {drift:+.1%}  {verdict}"
        )


def per_second(events: Sequence[tuple[float, int]]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for at, n in events:
        counts[int(at)] = counts.get(int(at), 0) + n
    return counts


def print_cpu(
    load: Load, rounds: Sequence[Round], during: Sequence[int], quiet: Sequence[int]
) -> None:
    """The broker's CPU in the seconds during and without rounds, and what the difference costs
    a purged row (the difference over the rounds' time, over the rows they purged)."""
    used: dict[int, float] = {}
    for (at, cpu), (_, after) in zip(load.cpu, load.cpu[1:], strict=False):
        used[round(at)] = after - cpu
    d = [used[s] for s in during if s in used]
    q = [used[s] for s in quiet if s in used]
    if not d or not q:
        return
    extra = statistics.fmean(d) - statistics.fmean(q)
    rows = sum(sum(r.counts.values()) for r in rounds)
    cost = extra * sum(r.seconds for r in rounds) / rows * 1e6 if rows else float("nan")
    print(
        f"   broker CPU         % of a core during {100 * statistics.fmean(d):>5.0f}   without "
        f"{100 * statistics.fmean(q):>5.0f}   the rounds' extra: {cost:.0f} us a purged row"
        + ("" if statistics.fmean(q) < 0.8 else " (the core was full: not a cost)")
    )


def print_throughput(load: Load, rounds: Sequence[Round], t0: float) -> None:
    print(
        "\n== while a purge round runs vs while none does: seconds a round overlapped >= 0.5 s vs "
        "seconds none touched, from the phase's first round on; request latency by whether the "
        "request overlapped a round"
    )
    streams = {
        "fixed-rate sends": (per_second([(a, n) for a, _, n in load.sends]), load.sends),
        "closed-loop sends": (per_second([(a, n) for a, _, n in load.closed]), load.closed),
    }
    acked = per_second(load.acks)
    for name, (start, end) in load.phases.items():
        inside = [r for r in rounds if r.end > start and r.start < end]
        print(f"-- {name} phase ({clock(start - t0)}-{clock(end - t0)}), {len(inside)} rounds")
        if not inside:
            print("   no purge round ran in this phase: nothing to compare")
            continue
        first = max(start + 5, min(r.start for r in inside))
        during: list[int] = []
        quiet: list[int] = []
        for second in range(int(first) + 1, int(end)):
            share = overlap(second, second + 1, inside)
            if share >= 0.5:
                during.append(second)
            elif share == 0:
                quiet.append(second)
        print(f"   seconds: {len(during)} during purge rounds, {len(quiet)} without")

        def rate(counts: dict[int, int], seconds: list[int]) -> float:
            return sum(counts.get(s, 0) for s in seconds) / len(seconds) if seconds else 0.0

        rows: list[tuple[str, dict[int, int], list[tuple[float, float, int]]]] = [
            ("acked (consumers)", acked, [])
        ]
        for label, (counts, sends) in streams.items():
            if any(first <= at < end for at, _, _ in sends):
                rows.insert(len(rows) - 1, (label, counts, sends))
        for label, counts, sends in rows:
            d, q = rate(counts, during), rate(counts, quiet)
            target = ""
            if label == "closed-loop sends":
                target = f"  (target >= {TARGET:.2f})"
            elif label == "fixed-rate sends":
                target = "  (equal by construction: the schedule held)"
            print(
                f"   {label:<18} msg/s during {d:>8,.0f}   without {q:>8,.0f}   ratio "
                f"{d / q if q else float('nan'):.3f}{target}"
            )
            if not sends:
                continue
            lat_during: list[float] = []
            lat_quiet: list[float] = []
            for at, lat, _ in sends:
                if first <= at < end:
                    bucket = lat_during if overlap(at - lat, at, inside) > 0 else lat_quiet
                    bucket.append(lat * 1000)
            for when, lats in (("during", lat_during), ("without", lat_quiet)):
                print(
                    f"   {'':<18} latency {when:<8} n={len(lats):>7,}  p50 "
                    f"{percentile(lats, 0.5):6.1f}  p99 {percentile(lats, 0.99):6.1f}  max "
                    f"{max(lats, default=float('nan')):6.1f} ms"
                )
        print_cpu(load, inside, during, quiet)


def report(load: Load, broker: Broker, args: argparse.Namespace, sqlite: bool) -> None:
    t0 = load.phases["fixed"][0]
    rounds, problems = purge_rounds(broker.log)
    print_rounds(rounds, t0)
    print_curve(load, t0, args.table_seconds, sqlite)
    print_flatness(load, t0, args, sqlite)
    print_pg(load, t0, args)
    print_throughput(load, rounds, t0)
    print(
        f"\nsent {load.sent:,} fixed-rate and {load.closed_sent:,} closed-loop (errors "
        f"{load.send_errors}), acked {load.acked:,} "
        f"(errors {load.ack_errors}); load average at the end {os.getloadavg()[0]:.2f}"
    )
    if problems:
        print(f"broker log: {len(problems)} warning/error lines, the first ones:")
        for line in problems[:10]:
            print(f"   {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="fixed-rate phase")
    parser.add_argument("--retention-seconds", type=float, default=60.0)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--rate", type=float, default=1500.0, help="messages a second offered")
    parser.add_argument("--batch", type=int, default=50, help="messages a send request")
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--connections", type=int, default=4, help="fixed-rate send connections")
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--closed-minutes", type=float, default=2.0, help="0: no closed loop")
    parser.add_argument("--closed-connections", type=int, default=16)
    parser.add_argument("--closed-batch", type=int, default=1, help="messages a closed-loop send")
    parser.add_argument("--purge-interval", type=float, default=60.0)
    parser.add_argument("--purge-batch", type=int, default=1000)
    parser.add_argument("--purge-pause", type=float, default=0.002)
    parser.add_argument("--purge-share", type=float, default=0.05)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--table-seconds", type=float, default=30.0)
    parser.add_argument("--ref-minute", type=float, default=2.0)
    parser.add_argument("--acl", action="store_true", help="ACL on: every request signed")
    parser.add_argument(
        "--acl-window-seconds",
        type=float,
        default=60.0,
        help="with --acl: how long a nonce is kept (the broker's default, 300, outlasts a short run)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the store and the broker log")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="halfmq-retention-soak-"))
    sqlite = args.store == "sqlite"
    schema = f"soak_{uuid.uuid4().hex[:8]}"
    admin = None
    if sqlite:
        db: Path | None = workdir / "soak.db"
        url = f"sqlite:///{db}"
    else:
        db = None
        admin = create_engine(PG_BASE, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        url = f"{PG_BASE}?options=-csearch_path%3D{schema}"
    print(
        f"retention soak: {args.store}, retention {args.retention_seconds:g} s, purge every "
        f"{args.purge_interval:g} s in units of {args.purge_batch} rows, {args.purge_pause:g} s "
        f"apart; fixed rate {args.rate:,.0f} msg/s in batches of {args.batch} x "
        f"{args.body_bytes} B for {args.minutes:g} min, then {args.closed_minutes:g} min more "
        f"with {args.closed_connections} closed-loop senders of {args.closed_batch} to an unread "
        f"topic; ACL {'on: every request signed' if args.acl else 'off'}; load average at the "
        f"start {os.getloadavg()[0]:.2f}"
    )
    broker = None
    try:
        acl = None
        if args.acl:
            acl = workdir / "acl.yml"
            acl.write_text(ACL_FILE)
        broker = start_broker(url, db, workdir / "broker.log", args, acl)
        print(f"broker PID {broker.pid} on port {broker.port}, log {broker.log}")
        load = asyncio.run(soak(broker, args, None if sqlite else (url, schema)))
        report(load, broker, args, sqlite)
    finally:
        if broker is not None:
            broker.stop()
        if admin is not None:
            with admin.connect() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            admin.dispose()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
