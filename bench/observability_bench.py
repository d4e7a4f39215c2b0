"""What observability costs: sends and transactions with trace and metrics on against both off.

    python bench/observability_bench.py [--seconds 3] [--windows 8] [--stores sqlite,postgresql]
                                        [--scrape-seconds 5] [--vary trace,metrics]

For each store it starts two brokers side by side on fresh stores: one with the defaults
(``trace`` and ``metrics`` on: the trace rows the broker writes, the request and store-commit
histograms, the store's readings at each scrape) and one with ``HALFMQ_TRACE=false
HALFMQ_METRICS=false``.  It loads one at a time with the same keep-alive load generator (32
connections), in ``--windows`` windows each of ``--seconds``, alternating off-on-on-off, so that
what else the machine runs weighs on both alike; both are scraped at ``/metrics`` every
``--scrape-seconds`` throughout, as Prometheus would.  Prints the rate of each window, the
requests per second over all windows, the broker's CPU per operation (all its threads, from
/proc: steadier than the rate on a busy machine), and the ratios; the issue's target is at most
5 % slower (on / off >= 0.95).  ``--vary metrics`` (or ``trace``) turns off only that setting in
the "off" broker, to see what each one costs.

First it times the metrics' own per-request and per-commit work in this process, without the
broker around them (the request timer around an app that only answers, the commit hook): figures
the machine's noise cannot hide.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
from broker_bench import cpu_seconds, free_port, start_broker
from loadgen import Connection, Result, run
from sqlalchemy import create_engine, text

from broker_service.api.observe import RequestTimer
from broker_service.metrics import BrokerMetrics
from broker_service.settings import BrokerSettings

PG_BASE = os.environ.get("HALFMQ_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
OPERATIONS = ("sends", "transactions")


@contextlib.contextmanager
def fresh_store(store: str, workdir: Path) -> Iterator[str]:
    if store == "sqlite":
        yield f"sqlite:///{workdir / f'{uuid.uuid4().hex[:8]}.db'}"
        return
    schema = f"halfmq_obs_bench_{uuid.uuid4().hex[:8]}"
    engine = create_engine(PG_BASE, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{PG_BASE}?options=-csearch_path%3D{schema}"
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


def start(url: str, port: int, off: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A broker with the settings ``off`` turned off (by their environment variables)."""
    env = os.environ | {f"HALFMQ_{name.upper()}": "false" for name in off}
    return start_broker(url, port, log, env=env)


async def scrape_every(port: int, seconds: float, stop: asyncio.Event) -> int:
    """Scrape ``/metrics`` like Prometheus until ``stop``; how many scrapes answered 200."""
    done = 0
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        while not stop.is_set():
            if (await client.get("/metrics")).status_code == 200:
                done += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), seconds)
    return done


async def send(conn: Connection, i: int) -> int:
    status, _ = await conn.request("POST", "/v1/topics/bench/messages",
                                   {"body": "hello world", "keys": [f"k{i}"]})  # fmt: skip
    if status != 201:
        raise ValueError(status)
    return 1


async def transaction(conn: Connection, i: int) -> int:
    status, data = await conn.request("POST", "/v1/transactions", {"body": "transfer",
                                      "topic": "bench", "producer_group": "bench",
                                      "keys": [f"t{i}"]})  # fmt: skip
    if status != 201:
        raise ValueError(status)
    txid = orjson.loads(data)["transaction_id"]
    status, _ = await conn.request("POST", f"/v1/transactions/{txid}/commit",
                                   {"producer_group": "bench"})  # fmt: skip
    if status != 200:
        raise ValueError(status)
    return 1


async def prepare(port: int) -> None:
    """The topic, and a group behind on it, so that each scrape reads a real lag."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        (await client.post("/v1/topics", json={"name": "bench", "queues": 8})).raise_for_status()
        group = {"name": "bench-readers", "consume_from": "FIRST_OFFSET"}
        (await client.post("/v1/consumer-groups", json=group)).raise_for_status()
        path = "/v1/consumer-groups/bench-readers/subscriptions"
        (await client.post(path, json={"topic": "bench"})).raise_for_status()


Broker = tuple[int, int]  # port, pid


async def alternate(
    brokers: dict[bool, Broker], windows: int, seconds: float, scrape: float
) -> dict[str, dict[bool, list[Result]]]:
    """Load one broker at a time in windows of ``seconds``, off and on in the order
    off-on-on-off (so a drift in time weighs on both alike), while both are scraped."""
    for port, _ in brokers.values():
        await prepare(port)
    stop = asyncio.Event()
    scrapers = [
        asyncio.create_task(scrape_every(port, scrape, stop)) for port, _ in brokers.values()
    ]
    results: dict[str, dict[bool, list[Result]]] = {
        name: {False: [], True: []} for name in OPERATIONS
    }
    for name, operation in zip(OPERATIONS, (send, transaction), strict=True):
        for window in range(windows):
            for on in (False, True) if window % 2 == 0 else (True, False):
                port, pid = brokers[on]
                result = await run(name, "127.0.0.1", port, operation, connections=32,
                                   seconds=seconds, warmup=0.5, probe=cpu_seconds(pid))  # fmt: skip
                if result.errors:
                    raise RuntimeError(f"{name}: {result.errors} errors")
                results[name][on].append(result)
    stop.set()
    if not all(await asyncio.gather(*scrapers)):
        raise RuntimeError("a broker answered no scrape")
    return results


def cpu_us(results: list[Result]) -> float:
    """The broker's CPU per operation over all the windows."""
    return sum(r.probed or 0.0 for r in results) / sum(r.operations for r in results) * 1e6


def rate(results: list[Result]) -> float:
    return sum(r.operations for r in results) / sum(r.seconds for r in results)


def bench_store(store: str, seconds: float, windows: int, scrape: float, vary: list[str]) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="halfmq-obs-bench-"))
    load_before = os.getloadavg()
    with contextlib.ExitStack() as stack:
        brokers: dict[bool, Broker] = {}
        for on in (False, True):
            url = stack.enter_context(fresh_store(store, workdir))
            port = free_port()
            process = start(url, port, [] if on else vary, workdir / f"broker-{port}.log")
            stack.callback(process.wait, 30)
            stack.callback(process.terminate)
            brokers[on] = (port, process.pid)
        results = asyncio.run(alternate(brokers, windows, seconds, scrape))
    load_after = os.getloadavg()
    print(f"\n{store}: {', '.join(vary)} off against on, {windows} windows of {seconds:g} s each, "
          f"alternating; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"({os.cpu_count()} CPUs)")  # fmt: skip
    for name in OPERATIONS:
        pairs = zip(results[name][False], results[name][True], strict=True)
        print(f"  {name} per window, off / on (req/s): "
              + ", ".join(f"{a.rate:,.0f} / {b.rate:,.0f}" for a, b in pairs))  # fmt: skip
    print(f"{'':<14}{'off (req/s)':>14}{'on (req/s)':>14}{'on / off':>10}"
          f"{'off CPU us/op':>15}{'on CPU us/op':>14}{'off / on':>10}")  # fmt: skip
    for name in OPERATIONS:
        off, on = rate(results[name][False]), rate(results[name][True])
        off_cpu, on_cpu = cpu_us(results[name][False]), cpu_us(results[name][True])
        print(f"{name:<14}{off:>14,.0f}{on:>14,.0f}{on / off:>10.2f}"
              f"{off_cpu:>15,.0f}{on_cpu:>14,.0f}{off_cpu / on_cpu:>10.2f}")  # fmt: skip


def per_call_costs(n: int = 200_000) -> None:
    """Microseconds the request timer adds to a request, and the commit hook to a commit."""

    class Route:
        path = "/v1/topics/{topic}/messages"

    async def answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope["route"] = Route
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def ignore(message: Any) -> None:
        return None

    async def per_request(app: Any) -> float:
        began = time.perf_counter()
        for _ in range(n):
            await app({"type": "http", "method": "POST", "path": "/v1/topics/t/messages"}, None,
                      ignore)  # fmt: skip
        return (time.perf_counter() - began) / n * 1e6

    metrics = BrokerMetrics()
    timed = RequestTimer(answer, histogram=metrics.request_seconds)
    bare = min(asyncio.run(per_request(answer)) for _ in range(3))
    with_timer = min(asyncio.run(per_request(timed)) for _ in range(3))
    began = time.perf_counter()
    for _ in range(n):
        metrics.observe_commit(0.003, 12)
    hook = (time.perf_counter() - began) / n * 1e6
    print(f"request timer: {with_timer - bare:.2f} us per request; commit hook: {hook:.2f} us "
          "per commit (this process, no broker around them)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3, help="one window")
    parser.add_argument("--windows", type=int, default=8, help="windows per broker and operation")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--scrape-seconds", type=float, default=5)
    parser.add_argument("--vary", default="trace,metrics", help="the settings 'off' turns off")
    args = parser.parse_args()
    vary = args.vary.split(",")
    missing = set(vary) - BrokerSettings.model_fields.keys()
    if missing:
        parser.error(f"the broker has no {', '.join(sorted(missing))} setting")
    per_call_costs()
    for store in args.stores.split(","):
        bench_store(store, args.seconds, args.windows, args.scrape_seconds, vary)


if __name__ == "__main__":
    main()
