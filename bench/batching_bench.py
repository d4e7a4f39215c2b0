"""Transactions through the framework with many in flight in one producer, batching on and off,
as ratios to the broker's echo route measured in the same run (issue 20).

    python bench/batching_bench.py [--seconds 5] [--rounds 3] [--concurrency 64]
                                   [--store sqlite|postgresql] [--linger-ms 2]

It starts a real broker process and, in each round, measures in turn:

* ``echo``: ``POST /v1/echo`` from 64 keep-alive connections of the benchmarks' cheap load
  generator (``loadgen.py``), touching no store: the HTTP ceiling ``broker_bench.py`` uses;
* ``sync on`` / ``sync off``: one :class:`TransactionProducer` whose ``send_message_in_transaction``
  (a local transaction that answers COMMIT_MESSAGE) runs on N threads, with ``batch_linger_ms`` as
  given and with 0 (one request per half and per decision, as before batching);
* ``async on`` / ``async off``: one :class:`AsyncTransactionProducer` on N tasks, the same.

Each figure is transactions (or echoes) per second after a one-second warm-up; a round runs every
figure once, and the table prints each round's and the medians, with each figure as a ratio to the
same round's echo, and the CPU each costs the broker (all its threads, from /proc; split into its
event loop, the main thread, and the rest: under these loads, its store writer) and the client
(this process; for echo, the load generator).  The target
(issue 20): transactions through the framework >= 1.0 x echo with batching on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import cpu_seconds
from framework_bench import bench_broker
from loadgen import Connection, run

from framework import (
    AsyncTransactionProducer,
    CheckMode,
    LocalTransactionState,
    Message,
    TransactionProducer,
)

COMMIT = LocalTransactionState.COMMIT_MESSAGE
WARMUP = 1.0
# per second; CPU seconds per operation of the broker, of its event loop, and of the client
Figure = tuple[float, float, float, float]


def loop_seconds(pid: int) -> Callable[[], float]:
    """The CPU time of the broker's event loop: its main thread (uvicorn runs the loop there);
    the rest of the broker's CPU is, under these loads, its store writer's thread."""
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return read


def echo(port: int, seconds: float, pid: int) -> Figure:
    async def one(conn: Connection, i: int) -> int:
        status, _ = await conn.request("POST", "/v1/echo", {"body": "hello", "n": i})
        if status != 200:
            raise ValueError(status)
        return 1

    cpu, loop = cpu_seconds(pid), loop_seconds(pid)
    readings: list[tuple[float, float, float]] = []

    def probe() -> float:  # read at the measured window's start and end
        readings.append((cpu(), loop(), time.process_time()))
        return 0.0

    result = asyncio.run(
        run("echo", "127.0.0.1", port, one, connections=64, seconds=seconds, probe=probe)
    )
    (cpu0, loop0, own0), (cpu1, loop1, own1) = readings
    done = max(1, result.operations)
    return result.rate, (cpu1 - cpu0) / done, (loop1 - loop0) / done, (own1 - own0) / done


def measured(work: Callable[[Callable[[], bool]], int], seconds: float, pid: int) -> Figure:
    """Run ``work(counting)`` -- which loops until ``counting()`` says the window is over and
    answers how many it did inside the window -- and rate it."""
    cpu, loop = cpu_seconds(pid), loop_seconds(pid)
    start = time.monotonic()
    begin, end = start + WARMUP, start + WARMUP + seconds
    marks: dict[str, float] = {}

    def window() -> None:
        time.sleep(max(0.0, begin - time.monotonic()))
        marks["cpu0"], marks["loop0"], marks["own0"] = cpu(), loop(), time.process_time()
        time.sleep(max(0.0, end - time.monotonic()))
        marks["cpu1"], marks["loop1"], marks["own1"] = cpu(), loop(), time.process_time()

    watcher = threading.Thread(target=window)
    watcher.start()
    done = work(lambda: time.monotonic() < end)
    watcher.join()
    broker, client = marks["cpu1"] - marks["cpu0"], marks["own1"] - marks["own0"]
    looped, n = marks["loop1"] - marks["loop0"], max(1, done)
    return done / seconds, broker / n, looped / n, client / n


def sync_transactions(
    base: str, threads: int, linger_ms: float, seconds: float, pid: int
) -> Figure:
    producer = TransactionProducer(
        "bench-sync", brokers=[base], check=CheckMode.none(), batch_linger_ms=linger_ms
    )
    producer.execute_local_transaction("bench")(lambda m, a: COMMIT)

    def work(running: Callable[[], bool]) -> int:
        counts = [0] * threads
        begin = time.monotonic() + WARMUP

        def loop(n: int) -> None:
            while running():
                result = producer.send_message_in_transaction(Message("bench", body="transfer"))
                if result.resolution != "COMMITTED":
                    raise RuntimeError(f"not committed: {result}")
                if time.monotonic() >= begin:
                    counts[n] += 1

        pool = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return sum(counts)

    with producer:
        return measured(work, seconds, pid)


def async_transactions(base: str, tasks: int, linger_ms: float, seconds: float, pid: int) -> Figure:
    async def main(running: Callable[[], bool]) -> int:
        producer = AsyncTransactionProducer(
            "bench-async", brokers=[base], check=CheckMode.none(), batch_linger_ms=linger_ms
        )

        @producer.execute_local_transaction("bench")
        async def local(message: Message, arg: object) -> LocalTransactionState:
            return COMMIT

        begin = time.monotonic() + WARMUP
        counted = 0

        async def loop() -> None:
            nonlocal counted
            while running():
                result = await producer.send_message_in_transaction(
                    Message("bench", body="transfer")
                )
                if result.resolution != "COMMITTED":
                    raise RuntimeError(f"not committed: {result}")
                if time.monotonic() >= begin:
                    counted += 1

        async with producer:
            await asyncio.gather(*(loop() for _ in range(tasks)))
        return counted

    return measured(lambda running: asyncio.run(main(running)), seconds, pid)


def row_text(name: str, figure: Figure, echo_rate: float) -> str:
    """One figure: its rate, as a ratio to echo, and its CPU per operation -- the broker's
    (its event loop's, and the rest: mostly the store writer's) and the client's."""
    rate, broker, loop, client = figure
    return (
        f"  {name:<24}{rate:>8,.0f}/s {rate / echo_rate:>5.2f} x echo   CPU/op: broker "
        f"{broker * 1e6:>6,.0f} us (loop {loop * 1e6:>5,.0f}, writer {(broker - loop) * 1e6:>5,.0f})"
        f", client {client * 1e6:>6,.0f} us"
    )


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64, help="threads, and tasks")
    parser.add_argument("--linger-ms", type=float, default=2.0, help="batch_linger_ms when on")
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    with bench_broker(args.store, "batching") as served:
        port, pid, base = served.port, served.process.pid, served.base
        n, s, linger = args.concurrency, args.seconds, args.linger_ms
        figures: dict[str, list[Figure]] = {}
        order: list[tuple[str, Callable[[], Figure]]] = [
            ("echo", lambda: echo(port, s, pid)),
            (f"sync on ({n} threads)", lambda: sync_transactions(base, n, linger, s, pid)),
            (f"sync off ({n} threads)", lambda: sync_transactions(base, n, 0, s, pid)),
            (f"async on ({n} tasks)", lambda: async_transactions(base, n, linger, s, pid)),
            (f"async off ({n} tasks)", lambda: async_transactions(base, n, 0, s, pid)),
        ]
        httpx.post(f"{base}/v1/topics", json={"name": "bench", "queues": 8}).raise_for_status()
        print(f"store {args.store}, {s:g} s per figure, linger {linger:g} ms, {args.rounds} rounds")
        print(f"load average at start: {load_average()}", flush=True)
        for number in range(1, args.rounds + 1):
            row = []
            for name, measure in order:
                figure = measure()
                figures.setdefault(name, []).append(figure)
                row.append(f"{name} {figure[0]:,.0f}/s")
            echo_rate = figures["echo"][-1][0]
            print(f"round {number} (load {load_average()}):", flush=True)
            for name, _ in order:
                print(row_text(name, figures[name][-1], echo_rate), flush=True)
        echo_median = statistics.median(f[0] for f in figures["echo"])
        print(f"medians of {args.rounds} rounds (load {load_average()}):")
        for name, _ in order:
            rate, broker, loop, client = (
                statistics.median(f[n] for f in figures[name]) for n in range(4)
            )
            print(row_text(name, (rate, broker, loop, client), echo_median))


if __name__ == "__main__":
    main()
