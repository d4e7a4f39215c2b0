"""Consumers end to end: send + receive + ack, idle long-poll wake-up, and a backlog drain -- with
pgqueuer's own throughput benchmark on the same PostgreSQL in the same run as the yardstick.

    python bench/consumer_bench.py [--seconds 10] [--stores postgresql,sqlite] [--backlog 100000]

For each store it starts a real broker process (flush=sync, the user's defaults) and, over loopback:

* end to end   2 producer connections send batches of 32; 4 consumer clients receive up to 32 at a
               time (long poll) and ack what they got.  The rate is messages acked per second,
               and the broker's CPU (from /proc) per acked message.  Then the same again with
               each batch's ack riding on the next receive (``POST .../ack-and-receive``: one
               request a batch instead of two), a topic and group of its own.
* wake-up      a receive long-polls an idle topic; a message is sent; the time from the send until
               the receive answers (p50 / p99 of 50).
* backlog      ``--backlog`` messages are stored first, then 4 consumers drain them; the broker's
               RSS is sampled during the drain (flat = it does not grow with the backlog).  On
               SQLite the writer's page cache (``cache_size=-32768`` in store/engine.py, 32 MB)
               fills while the drain touches new pages: RSS rises by at most that, then stays.

pgqueuer (PyPI) runs its throughput strategy as its ``tools/benchmark.py`` does (psycopg driver,
1 enqueuer x batches of 10, 5 dequeuers x batches of 10) on a fresh schema of the same database.
It prints the figures and the ratios the issue asks for: PostgreSQL end to end / pgqueuer >= 1,
SQLite end to end / PostgreSQL end to end >= 1.2, wake-up p50 < 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_bench import PG_BASE, RssSampler, free_port, start_broker
from loadgen import Connection

BATCH = 32


@dataclass
class Figures:
    store: str
    e2e_rate: float = 0.0
    e2e_sent: int = 0
    e2e_cpu_ms: float = 0.0  # the broker's CPU per acked message
    ride_rate: float = 0.0  # the same with the acks riding on the receives
    ride_cpu_ms: float = 0.0
    wake_ms: list[float] = field(default_factory=list)
    drain_rate: float = 0.0
    rss_mb: list[float] = field(default_factory=list)
    rss_before_mb: float = 0.0

    def wake(self, p: float) -> float:
        ordered = sorted(self.wake_ms)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


async def _call(conn: Connection, path: str, body: object, ok: int = 200) -> dict[str, object]:
    status, data = await conn.request("POST", path, body)
    if status != ok:
        raise RuntimeError(f"{path}: HTTP {status} {data[:200]!r}")
    answer: dict[str, object] = orjson.loads(data)
    return answer


async def _setup(port: int, topic: str, group: str, queues: int = 4) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        await client.post("/v1/topics", json={"name": topic, "queues": queues})
        await client.post(
            "/v1/consumer-groups", json={"name": group, "consume_from": "FIRST_OFFSET"}
        )
        await client.post(f"/v1/consumer-groups/{group}/subscriptions", json={"topic": topic})


async def _consumer(
    port: int, group: str, name: str, stop: asyncio.Event, counts: list[int], ride: bool
) -> None:
    """Receive, ack what came; ``ride``: the ack goes with the next receive."""
    conn = await Connection.open("127.0.0.1", port)
    body = {"client_id": name, "max_messages": BATCH, "wait_seconds": 0.5}
    path = f"/v1/consumer-groups/{group}"
    handles: list[object] = []
    try:
        while not stop.is_set():
            if handles:
                ridden = {**body, "receipt_handles": handles}
                got = await _call(conn, f"{path}/ack-and-receive", ridden)
                counts[0] += len(handles)
            else:
                got = await _call(conn, f"{path}/receive", body)
            messages = got["messages"]
            assert isinstance(messages, list)
            handles = [m["receipt_handle"] for m in messages]
            if handles and not ride:
                await _call(conn, f"{path}/ack", {"receipt_handles": handles})
                counts[0] += len(handles)
                handles = []
        if handles:
            await _call(conn, f"{path}/ack", {"receipt_handles": handles})
    finally:
        conn.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def end_to_end(
    port: int, seconds: float, figures: Figures, pid: int, *, ride: bool = False
) -> None:
    topic = "e2e-ride" if ride else "e2e"
    await _setup(port, topic, f"{topic}-group")
    stop = asyncio.Event()
    acked = [0]
    sent = [0]
    payload = {"messages": [{"body": "hello world", "tags": "TagA"} for _ in range(BATCH)]}

    async def producer() -> None:
        conn = await Connection.open("127.0.0.1", port)
        try:
            while not stop.is_set():
                if sent[0] - acked[0] > 4000:  # keep the backlog small: this measures flow
                    await asyncio.sleep(0.002)
                    continue
                await _call(conn, f"/v1/topics/{topic}/messages:batch", payload, ok=201)
                sent[0] += BATCH
        finally:
            conn.close()

    tasks = [asyncio.create_task(producer()) for _ in range(2)]
    tasks += [
        asyncio.create_task(_consumer(port, f"{topic}-group", f"c{n}", stop, acked, ride))
        for n in range(4)
    ]
    await asyncio.sleep(1.0)  # warm-up
    start_acked, started, cpu = acked[0], time.perf_counter(), cpu_seconds(pid)
    await asyncio.sleep(seconds)
    count = acked[0] - start_acked
    rate = count / (time.perf_counter() - started)
    cpu_ms = (cpu_seconds(pid) - cpu) * 1000 / max(count, 1)
    if ride:
        figures.ride_rate, figures.ride_cpu_ms = rate, cpu_ms
    else:
        figures.e2e_rate, figures.e2e_cpu_ms, figures.e2e_sent = rate, cpu_ms, sent[0]
    stop.set()
    await asyncio.gather(*tasks)


async def wake_up(port: int, samples: int, figures: Figures) -> None:
    await _setup(port, "idle", "idle-group", queues=1)
    receiver = await Connection.open("127.0.0.1", port)
    sender = await Connection.open("127.0.0.1", port)
    body = {"client_id": "waiter", "max_messages": 1, "wait_seconds": 5}
    try:
        for i in range(samples):
            waiting = asyncio.create_task(
                _call(receiver, "/v1/consumer-groups/idle-group/receive", body)
            )
            await asyncio.sleep(0.05)  # the receive is parked in its long poll
            began = time.perf_counter()
            await _call(sender, "/v1/topics/idle/messages", {"body": f"w{i}"}, ok=201)
            got = await waiting
            figures.wake_ms.append((time.perf_counter() - began) * 1000)
            messages = got["messages"]
            assert isinstance(messages, list)
            assert len(messages) == 1
            handles = [messages[0]["receipt_handle"]]
            await _call(sender, "/v1/consumer-groups/idle-group/ack", {"receipt_handles": handles})
    finally:
        receiver.close()
        sender.close()


async def backlog(port: int, total: int, sampler: Sampler, figures: Figures) -> None:
    await _setup(port, "backlog", "backlog-group")
    conn = await Connection.open("127.0.0.1", port)
    payload = {"messages": [{"body": "x" * 100} for _ in range(500)]}
    for _ in range(total // 500):
        await _call(conn, "/v1/topics/backlog/messages:batch", payload, ok=201)
    conn.close()
    figures.rss_before_mb = sampler.current_kb() / 1024
    stop = asyncio.Event()
    acked = [0]
    started = time.perf_counter()
    tasks = [
        asyncio.create_task(_consumer(port, "backlog-group", f"d{n}", stop, acked, False))
        for n in range(4)
    ]
    next_sample = 0
    while acked[0] < total:
        await asyncio.sleep(0.1)
        if acked[0] >= next_sample:
            figures.rss_mb.append(sampler.current_kb() / 1024)
            next_sample += total // 10
        if time.perf_counter() - started > 600:
            break
    figures.drain_rate = acked[0] / (time.perf_counter() - started)
    figures.rss_mb.append(sampler.current_kb() / 1024)
    stop.set()
    await asyncio.gather(*tasks)


class Sampler(RssSampler):
    def current_kb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


def bench_store(store: str, seconds: float, total: int, ride_first: bool = False) -> Figures:
    workdir = Path(tempfile.mkdtemp(prefix="halfmq-consumer-bench-"))
    schema = None
    admin = None
    if store == "sqlite":
        url = f"sqlite:///{workdir / 'bench.db'}"
    else:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(PG_BASE, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        url = f"{PG_BASE}?options=-csearch_path%3D{schema}"
    port = free_port()
    process = start_broker(url, port, workdir / "broker.log")
    sampler = Sampler(process.pid)
    sampler.start()
    figures = Figures(store)
    try:
        for ride in (True, False) if ride_first else (False, True):
            asyncio.run(end_to_end(port, seconds, figures, process.pid, ride=ride))
        asyncio.run(wake_up(port, 50, figures))
        if total:
            asyncio.run(backlog(port, total, sampler, figures))
    finally:
        sampler.running = False
        process.terminate()
        process.wait(timeout=30)
        if admin is not None:
            with admin.connect() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            admin.dispose()
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


# -- pgqueuer, its own throughput strategy ---------------------------------------------------------


async def _pgqueuer_throughput(dsn: str, seconds: float) -> float:
    import psycopg
    from pgqueuer import PgQueuer
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries

    async def connect() -> Queries:
        conn = await psycopg.AsyncConnection.connect(conninfo=dsn, autocommit=True)
        return Queries(PsycopgDriver(conn))

    setup = await connect()
    await setup.clear_queue()
    done = [0]
    stop = asyncio.Event()
    queuers: list[PgQueuer] = []
    for _ in range(5):
        pgq = PgQueuer((await connect()).driver)

        @pgq.entrypoint("asyncfetch")
        async def asyncfetch(job: Job) -> None:
            done[0] += 1

        queuers.append(pgq)

    async def enqueue() -> None:
        queries = await connect()
        n = 0
        while not stop.is_set():
            await queries.enqueue(
                ["asyncfetch"] * 10, [str(n + k).encode() for k in range(10)], [0] * 10
            )
            n += 10

    runs = [asyncio.create_task(pgq.run(batch_size=10)) for pgq in queuers]
    producer = asyncio.create_task(enqueue())
    await asyncio.sleep(1.0)
    start, started = done[0], time.perf_counter()
    await asyncio.sleep(seconds)
    rate = (done[0] - start) / (time.perf_counter() - started)
    stop.set()
    for pgq in queuers:
        pgq.shutdown.set()
    await producer
    for run in runs:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(run, 10)
    return rate


def bench_pgqueuer(seconds: float) -> float:
    schema = f"pgq_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_BASE, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    plain = PG_BASE.replace("postgresql+psycopg://", "postgresql://")
    dsn = f"{plain}?options=-csearch_path%3D{schema}"
    try:
        subprocess.run(
            [sys.executable, "-m", "pgqueuer", "--pg-dsn", dsn, "install"],
            check=True,
            capture_output=True,
        )
        return asyncio.run(_pgqueuer_throughput(dsn, seconds))
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--stores", default="postgresql,sqlite")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--no-pgqueuer", action="store_true")
    parser.add_argument(
        "--ride-first", action="store_true", help="the acks riding on receives measured first"
    )
    args = parser.parse_args()
    results = {
        s.strip(): bench_store(s.strip(), args.seconds, args.backlog, args.ride_first)
        for s in args.stores.split(",")
    }
    pgq = None if args.no_pgqueuer else bench_pgqueuer(args.seconds)
    print(f"\n== consumers end to end ({args.seconds:.0f} s, 4 consumers x {BATCH}, flush=sync)")
    print(
        f"{'store':<12}{'e2e msg/s':>11}{'wake p50':>10}{'wake p99':>10}{'drain/s':>10}"
        f"{'RSS MB (before, during drain...)':>36}"
    )
    for name, f in results.items():
        rss = ", ".join(f"{x:.0f}" for x in [f.rss_before_mb, *f.rss_mb]) if f.rss_mb else "-"
        print(
            f"{name:<12}{f.e2e_rate:>11,.0f}{f.wake(0.5):>9.1f}ms{f.wake(0.99):>8.1f}ms"
            f"{f.drain_rate:>10,.0f}   {rss}"
        )
    if pgq is not None:
        print(
            f"{'pgqueuer':<12}{pgq:>11,.0f}   (its throughput strategy: enqueue + dequeue, psycopg)"
        )
    pg, lite = results.get("postgresql"), results.get("sqlite")
    if pg is not None and pgq:
        print(f"ratio PostgreSQL e2e / pgqueuer = {pg.e2e_rate / pgq:.2f}  (goal >= 1)")
    if pg is not None and lite is not None and pg.e2e_rate:
        print(
            f"ratio SQLite e2e / PostgreSQL e2e = {lite.e2e_rate / pg.e2e_rate:.2f}  (goal >= 1.2)"
        )
    for name, f in results.items():
        print(f"{name}: wake-up p50 {f.wake(0.5):.1f} ms (goal < 10 ms)")
    for name, f in results.items():
        print(
            f"{name}: receive + ack {f.e2e_rate:,.0f} msg/s at {f.e2e_cpu_ms * 1000:.0f} us of "
            f"broker CPU each; acks riding on receives {f.ride_rate:,.0f} msg/s at "
            f"{f.ride_cpu_ms * 1000:.0f} us (x{f.ride_rate / max(f.e2e_rate, 1):.2f} the rate, "
            f"x{f.ride_cpu_ms / max(f.e2e_cpu_ms, 1e-9):.2f} the CPU)"
        )


if __name__ == "__main__":
    main()
