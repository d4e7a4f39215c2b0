"""Broker throughput on SQLite and PostgreSQL, as ratios to an echo ceiling measured in the same run.

    python bench/broker_bench.py [--seconds 5] [--connections 64] [--stores sqlite,postgresql]
                                 [--phases echo,sends,transactions,batch]

For each store it starts a real broker process (uvicorn, the same settings a user gets, flush=sync)
and loads it over loopback from this process with many keep-alive connections:

* echo         POST /v1/echo: FastAPI + the same server, no store (the ceiling);
* sends        POST /v1/topics/bench/messages, one small message each;
* transactions POST /v1/transactions then POST .../commit (one transaction = two requests);
* batch sends  POST /v1/topics/bench/messages:batch with 100 messages;
* raw commits  the store's single-row INSERT + COMMIT rate, in a loop, without the broker;
* raw inserts  the ``messages`` table's batched insert rate (1,000 rows per commit, the broker's
               schema, the writer's own insert; the insert and commit timed, not building the
               rows): the store's ceiling for batch sends.

It prints rates, p50/p99 latency, each rate as a ratio to echo, the broker's CPU (all threads, from
/proc) per operation in the measured window, and the broker's peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx
import orjson
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import Connection, Result, run

PG_BASE = os.environ.get("HALFMQ_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = 0
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
            except OSError:
                return
            time.sleep(0.2)


def start_broker(
    url: str,
    port: int,
    log: Path,
    *,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A broker process on ``url`` (its schema upgraded first) serving ``port``, once ready:
    ``extra`` arguments to ``halfmq broker serve``, ``env`` its environment (this one's if None);
    its output goes to ``log``."""
    subprocess.run(
        [sys.executable, "-m", "halfmq", "db", "upgrade", "--database-url", url],
        check=True,
        capture_output=True,
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "halfmq",
                "broker",
                "serve",
                "--database-url",
                url,
                "--port",
                str(port),
                "--log-level",
                "warning",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    return wait_ready(port, process, log)


def wait_ready(port: int, process: subprocess.Popen[bytes], log: Path) -> subprocess.Popen[bytes]:
    """``process`` once its broker answers ``/readyz`` 200 on ``port`` (30 s at most; killed and
    its log shown if it does not)."""
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"broker did not start: {log.read_text()}")


def raw_commit_rate(url: str, seconds: float) -> float:
    """Single-row INSERT + COMMIT in a loop, same durability settings as the broker's writer."""
    from broker_service.settings import Flush
    from broker_service.store.engine import make_engine

    engine = make_engine(url, flush=Flush.SYNC, writer=True)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER, v TEXT)"))
    count = 0
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO bench_raw VALUES (:i, 'x')"), {"i": count})
        count += 1
    engine.dispose()
    return count / seconds


def raw_batch_insert_rate(url: str, seconds: float, per_commit: int = 1000) -> float:
    """The ``messages`` table's own ceiling for batch sends: rows shaped like the bench's batch
    messages, inserted the way the writer inserts them (``insert_plain_messages``) into the broker's
    schema (all its indexes), ``per_commit`` rows per commit, same durability settings.  Only the
    insert and the commit are timed: building the rows (Python, the broker's share) is not."""
    from broker_service.domain.ids import new_id
    from broker_service.settings import Flush
    from broker_service.store import statements as sql
    from broker_service.store.engine import make_engine
    from broker_service.store.rows import PLAIN_MESSAGE_COLUMNS

    engine = make_engine(url, flush=Flush.SYNC, writer=True)
    now = int(time.time() * 1000)
    base: dict[str, object] = {"topic": "bench_raw", "body": b"hello world", "encoding": "utf-8"}
    count = 0
    timed = 0.0
    while timed < seconds:
        rows = []
        for n in range(count, count + per_commit):
            values = dict(base, queue_id=n % 8, queue_offset=n // 8, msg_id=new_id())
            values.update(born_at=now, stored_at=now)
            rows.append(tuple(values[c] for c in PLAIN_MESSAGE_COLUMNS))
        started = time.perf_counter()
        with engine.begin() as conn:  # the batch's rows are plain: the writer's plain insert
            sql.insert_plain_messages.execute(conn, rows)
        timed += time.perf_counter() - started
        count += per_commit
    engine.dispose()
    return count / timed


def cpu_seconds(pid: int) -> Callable[[], float]:
    """A probe of a process's CPU time (user + system, all threads), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return read


async def load(
    port: int, seconds: float, connections: int, phases: Sequence[str], broker_pid: int
) -> dict[str, Result]:
    async def echo(conn: Connection, i: int) -> int:
        status, _ = await conn.request("POST", "/v1/echo", {"body": "hello", "n": i})
        if status != 200:
            raise ValueError(status)
        return 1

    async def send(conn: Connection, i: int) -> int:
        status, _ = await conn.request(
            "POST", "/v1/topics/bench/messages", {"body": "hello world", "keys": [f"k{i}"]}
        )
        if status != 201:
            raise ValueError(status)
        return 1

    async def transaction(conn: Connection, i: int) -> int:
        status, data = await conn.request(
            "POST",
            "/v1/transactions",
            {"body": "transfer", "topic": "bench", "producer_group": "bench", "keys": [f"t{i}"]},
        )
        if status != 201:
            raise ValueError(status)
        txid = orjson.loads(data)["transaction_id"]
        status, _ = await conn.request(
            "POST", f"/v1/transactions/{txid}/commit", {"producer_group": "bench"}
        )
        if status != 200:
            raise ValueError(status)
        return 1

    batch_body = {"messages": [{"body": "hello world"} for _ in range(100)]}

    async def batch(conn: Connection, i: int) -> int:
        status, _ = await conn.request("POST", "/v1/topics/bench/messages:batch", batch_body)
        if status != 201:
            raise ValueError(status)
        return 100

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        await client.post("/v1/topics", json={"name": "bench", "queues": 8})
    results = {}
    for name, operation, conns in (
        ("echo", echo, connections),
        ("sends", send, connections),
        ("transactions", transaction, connections),
        ("batch sends", batch, max(4, connections // 8)),
    ):
        if name.split()[0] not in phases:
            continue
        results[name] = await run(
            name,
            "127.0.0.1",
            port,
            operation,
            connections=conns,
            seconds=seconds,
            probe=cpu_seconds(broker_pid),
        )
    return results


def bench_store(store: str, seconds: float, connections: int, phases: Sequence[str]) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="halfmq-bench-"))
    schema = None
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
    sampler = RssSampler(process.pid)
    sampler.start()
    try:
        results = asyncio.run(load(port, seconds, connections, phases, process.pid))
    finally:
        sampler.running = False
        process.terminate()
        process.wait(timeout=30)
    raw = raw_commit_rate(url, min(seconds, 3.0))
    raw_batch = raw_batch_insert_rate(url, min(seconds, 3.0))
    echo = results["echo"].rate if "echo" in results else float("nan")
    print(f"\n== {store} ({connections} connections, {seconds:.0f} s per phase, flush=sync)")
    print(
        f"{'what':<14}{'per second':>12}{'x echo':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
        f"{'broker CPU us/op':>18}"
    )
    for name, result in results.items():
        done = result.rate * result.seconds
        cpu = (result.probed or 0.0) / done * 1e6 if done else float("nan")
        print(
            f"{name:<14}{result.rate:>12,.0f}{result.rate / echo:>9.2f}"
            f"{result.percentile(0.5):>9.1f}{result.percentile(0.99):>9.1f}{result.errors:>8}"
            f"{cpu:>18,.0f}"
        )
    print(f"{'raw commits':<14}{raw:>12,.0f}{raw / echo:>9.2f}   (single-row INSERT+COMMIT)")
    print(
        f"{'raw inserts':<14}{raw_batch:>12,.0f}{raw_batch / echo:>9.2f}"
        "   (messages rows, 1,000 per commit, insert + commit only: the store's batch ceiling)"
    )
    print(f"broker peak RSS: {sampler.peak_kb / 1024:.0f} MB")
    if schema is not None:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
    shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument(
        "--phases",
        default="echo,sends,transactions,batch",
        help="which loads to run (the ratios need echo)",
    )
    args = parser.parse_args()
    phases = [p.strip() for p in args.phases.split(",")]
    for store in args.stores.split(","):
        bench_store(store.strip(), args.seconds, args.connections, phases)


if __name__ == "__main__":
    main()
