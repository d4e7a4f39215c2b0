"""The client framework against raw HTTP calls to the same broker, measured in the same run.

    python bench/framework_bench.py [--seconds 4] [--threads 16] [--messages 3000] [--store sqlite|postgresql]
    python bench/framework_bench.py --client-trace   # the client trace's cost: on against off

It starts a real broker process and measures, each side by side with the raw REST calls doing the
same work over the same kind of client:

* transactions/s, sync:  ``TransactionProducer.send_message_in_transaction`` (a trivial local
  transaction that answers COMMIT_MESSAGE) on N threads, vs ``POST /v1/transactions`` + ``POST
  .../commit`` on N threads with one ``httpx.Client``;
* transactions/s, async: ``AsyncTransactionProducer`` on N tasks vs the same calls on
  ``httpx.AsyncClient``;
* messages/s through a consumer: ``PushConsumer`` (trivial handler) draining a topic of M
  messages, vs raw pollers doing ``receive`` (32) + ``ack``: per message (ack mode AUTO) and one
  ack per batch (ack mode BATCH vs one ack call per received batch).

Raw and framework runs alternate (raw, framework, raw, framework, ...) and each figure is the
median of its three runs (a loaded machine makes single runs noisy).  The target: every
framework figure at least 0.8 of its raw one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import free_port, start_broker

from framework import (
    AckMode,
    AsyncTransactionProducer,
    BatchAck,
    CheckMode,
    LocalTransactionState,
    Message,
    PushConsumer,
    TransactionProducer,
)

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROUNDS = 3  # raw and framework alternate; each figure is the median of its rounds


@dataclass(frozen=True)
class BenchBroker:
    """A broker process of a bench's own, on 127.0.0.1:``port``."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def bench_broker(
    store: str,
    name: str,
    start: Callable[[str, int, Path], subprocess.Popen[bytes]] = start_broker,
) -> Iterator[BenchBroker]:
    """A real broker process (``start``: ``broker_bench.start_broker`` unless another server is
    asked for) on a store of its own: a SQLite file in a temporary folder, or (``store``
    "postgresql") a schema ``{name}_bench_...`` of its own in the PostgreSQL at ``PG``; stopped,
    and its folder and schema dropped, afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f"halfmq-{name}-bench-"))
    schema = f"{name}_bench_{uuid.uuid4().hex[:8]}"
    if store == "sqlite":
        url = f"sqlite:///{folder / 'broker.db'}"
    else:
        from sqlalchemy import create_engine, text

        with create_engine(PG, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = f"{PG}?options=-csearch_path%3D{schema}"
    port = free_port()
    process = start(url, port, folder / "broker.log")
    try:
        yield BenchBroker(port, process)
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
        if store == "postgresql":
            from sqlalchemy import create_engine, text

            with create_engine(PG, isolation_level="AUTOCOMMIT").connect() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


# -- producers -------------------------------------------------------------------------------------


def threaded_rate(work: Callable[[], object], threads: int, seconds: float) -> float:
    done = [0] * threads
    deadline = time.monotonic() + seconds

    def loop(n: int) -> None:
        while time.monotonic() < deadline:
            work()
            done[n] += 1

    started = time.monotonic()
    pool = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(done) / (time.monotonic() - started)


def raw_sync_tx(base: str, threads: int, seconds: float) -> float:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
    with httpx.Client(base_url=base, limits=limits, timeout=30) as client:

        def one() -> None:
            half = client.post(
                "/v1/transactions",
                json={
                    "topic": "bench",
                    "producer_group": "raw",
                    "body": "x",
                    "msg_id": uuid.uuid4().hex,
                },
            )
            half.raise_for_status()
            txid = half.json()["transaction_id"]
            client.post(
                f"/v1/transactions/{txid}/commit", json={"producer_group": "raw"}
            ).raise_for_status()

        return threaded_rate(one, threads, seconds)


def framework_sync_tx(base: str, threads: int, seconds: float, trace: bool = True) -> float:
    producer = TransactionProducer("fw", brokers=[base], check=CheckMode.none(), client_trace=trace)
    producer.execute_local_transaction("bench")(lambda m, a: COMMIT)
    with producer:
        return threaded_rate(
            lambda: producer.send_message_in_transaction(Message("bench", body="x")),
            threads,
            seconds,
        )


async def tasks_rate(work: Callable[[], object], tasks: int, seconds: float) -> float:
    done = 0
    deadline = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < deadline:
            await work()  # type: ignore[misc]
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(tasks)))
    return done / (time.monotonic() - started)


async def raw_async_tx(base: str, tasks: int, seconds: float) -> float:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:

        async def one() -> None:
            half = await client.post(
                "/v1/transactions",
                json={
                    "topic": "bench",
                    "producer_group": "raw",
                    "body": "x",
                    "msg_id": uuid.uuid4().hex,
                },
            )
            half.raise_for_status()
            txid = half.json()["transaction_id"]
            done = await client.post(
                f"/v1/transactions/{txid}/commit", json={"producer_group": "raw"}
            )
            done.raise_for_status()

        return await tasks_rate(one, tasks, seconds)


async def framework_async_tx(base: str, tasks: int, seconds: float, trace: bool = True) -> float:
    producer = AsyncTransactionProducer(
        "fw", brokers=[base], check=CheckMode.none(), client_trace=trace
    )

    @producer.execute_local_transaction("bench")
    async def local(message: Message, arg: object) -> LocalTransactionState:
        return COMMIT

    async with producer:
        return await tasks_rate(
            lambda: producer.send_message_in_transaction(Message("bench", body="x")), tasks, seconds
        )


# -- consumers -------------------------------------------------------------------------------------


def fill(base: str, topic: str, count: int) -> None:
    with httpx.Client(base_url=base, timeout=60) as client:
        client.post("/v1/topics", json={"name": topic, "queues": 4}).raise_for_status()
        for start in range(0, count, 500):
            batch = [{"body": str(n)} for n in range(start, min(count, start + 500))]
            client.post(
                f"/v1/topics/{topic}/messages:batch", json={"messages": batch}
            ).raise_for_status()


def raw_consume(base: str, count: int, pollers: int, per_message_ack: bool) -> float:
    topic, group = f"raw-{uuid.uuid4().hex[:8]}", f"raw-{uuid.uuid4().hex[:8]}"
    fill(base, topic, count)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
    consumed = [0]
    lock = threading.Lock()
    with httpx.Client(base_url=base, limits=limits, timeout=30) as client:
        client.post(
            "/v1/consumer-groups", json={"name": group, "consume_from": "FIRST_OFFSET"}
        ).raise_for_status()
        client.post(
            f"/v1/consumer-groups/{group}/subscriptions", json={"topic": topic}
        ).raise_for_status()

        def poll(n: int) -> None:
            while True:
                with lock:
                    if consumed[0] >= count:
                        return
                body = {"client_id": f"raw-{n}", "max_messages": 32, "wait_seconds": 1}
                messages = client.post(f"/v1/consumer-groups/{group}/receive", json=body).json()[
                    "messages"
                ]
                handles = [m["receipt_handle"] for m in messages]
                for chunk in (
                    [[h] for h in handles] if per_message_ack else [handles] if handles else []
                ):
                    client.post(f"/v1/consumer-groups/{group}/ack", json={"receipt_handles": chunk})
                with lock:
                    consumed[0] += len(handles)

        started = time.monotonic()
        pool = [threading.Thread(target=poll, args=(n,)) for n in range(pollers)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return count / (time.monotonic() - started)


def framework_consume(
    base: str, count: int, pollers: int, mode: AckMode, trace: bool = True
) -> float:
    topic, group = f"fw-{uuid.uuid4().hex[:8]}", f"fw-{uuid.uuid4().hex[:8]}"
    fill(base, topic, count)
    consumed = [0]
    lock = threading.Lock()
    finished = threading.Event()

    consumer = PushConsumer(
        group,
        brokers=[base],
        consume_from="FIRST_OFFSET",
        ack_mode=mode,
        batch_size=32 * pollers,
        concurrency=pollers,
        wait_seconds=1,
        batch_ack=BatchAck(max_count=32, max_delay=0.05),
        client_trace=trace,
    )

    @consumer.subscribe(topic)
    def handle(message: Message) -> None:
        with lock:
            consumed[0] += 1
            if consumed[0] >= count:
                finished.set()

    started = time.monotonic()
    consumer.start()
    finished.wait(300)
    elapsed = time.monotonic() - started
    consumer.shutdown()
    return count / elapsed


def pair(
    name: str,
    raw: Callable[[], float],
    framework: Callable[[], float],
    labels: tuple[str, str] = ("raw", "framework"),
) -> float:
    raws, fws = [], []
    for _ in range(ROUNDS):
        raws.append(raw())
        fws.append(framework())
    r, f = statistics.median(raws), statistics.median(fws)
    first, second = labels
    print(f"{name:<44} {first} {r:9.1f}/s   {second} {f:9.1f}/s   ratio {f / r:5.2f}", flush=True)
    return f / r


def client_trace_pairs(base: str, args: argparse.Namespace) -> list[float]:
    """The framework with its client trace (on by default) against without, alternating."""
    off_on = ("trace off", "trace on")
    return [
        pair(
            "send_message_in_transaction, sync",
            lambda: framework_sync_tx(base, args.threads, args.seconds, trace=False),
            lambda: framework_sync_tx(base, args.threads, args.seconds),
            off_on,
        ),
        pair(
            "send_message_in_transaction, asyncio",
            lambda: asyncio.run(framework_async_tx(base, args.threads, args.seconds, False)),
            lambda: asyncio.run(framework_async_tx(base, args.threads, args.seconds)),
            off_on,
        ),
        pair(
            "PushConsumer, ack per message (AUTO)",
            lambda: framework_consume(base, args.messages, 4, AckMode.AUTO, trace=False),
            lambda: framework_consume(base, args.messages, 4, AckMode.AUTO),
            off_on,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument(
        "--client-trace",
        action="store_true",
        help="instead: the framework with its client trace on against off (target >= 0.95)",
    )
    args = parser.parse_args()
    with bench_broker(args.store, "fw") as broker:
        base = broker.base
        httpx.post(f"{base}/v1/topics", json={"name": "bench", "queues": 8}).raise_for_status()
        print(f"store {args.store}, {args.threads} threads/tasks, {args.seconds}s per run")
        if args.client_trace:
            ratios = client_trace_pairs(base, args)
            print(f"lowest ratio {min(ratios):.2f} (target >= 0.95)")
            return
        ratios = [
            pair(
                "send_message_in_transaction, sync",
                lambda: raw_sync_tx(base, args.threads, args.seconds),
                lambda: framework_sync_tx(base, args.threads, args.seconds),
            ),
            pair(
                "send_message_in_transaction, asyncio",
                lambda: asyncio.run(raw_async_tx(base, args.threads, args.seconds)),
                lambda: asyncio.run(framework_async_tx(base, args.threads, args.seconds)),
            ),
            pair(
                "PushConsumer, ack per message (AUTO)",
                lambda: raw_consume(base, args.messages, 4, per_message_ack=True),
                lambda: framework_consume(base, args.messages, 4, AckMode.AUTO),
            ),
            pair(
                "PushConsumer, ack per batch (BATCH)",
                lambda: raw_consume(base, args.messages, 4, per_message_ack=False),
                lambda: framework_consume(base, args.messages, 4, AckMode.BATCH),
            ),
        ]
        print(f"lowest ratio {min(ratios):.2f} (target >= 0.80)")


if __name__ == "__main__":
    main()
